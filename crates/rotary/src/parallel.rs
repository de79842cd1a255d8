//! The threading threshold shared by the rotation ([`crate::apply`]) and the table expansion
//! ([`crate::table`]).

/// Elements (q and k together) below which a call runs on the calling thread: a single-token
/// decode step must not pay for waking a thread pool. Handing a call to the pool and waiting
/// for it cost 5 to 25 microseconds on the 2-core VM we measured, which two threads win back
/// only between 2^17 and 2^18 elements (2^17 f32 elements ran 1.7x faster on the calling
/// thread alone, 2^18 1.5x faster on two threads).
pub const PARALLEL_MIN_ELEMENTS: usize = 1 << 18;
