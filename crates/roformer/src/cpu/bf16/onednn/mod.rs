//! bf16 products through Intel's oneDNN, where it is installed: its matmul dispatches to the
//! AMX tiles on CPUs that have them (`brg:avx512_core_amx`) and to `vdpbf16ps` on the others
//! (`brg:avx512_core_bf16`, e.g. AMD Zen 4).
//!
//! The product is the one of [`super`]:
//!
//! ```text
//! C = (accumulate ? C : 0) + alpha * sum_k bf16(A[i, k]) bf16(B[k, j])     (f32 accumulation)
//! ```
//!
//! with the operands as our own kernel packs them, so nothing is converted twice:
//! - `A`: rows of pair words (`pack_panels`' row layout), that is bf16 rows of `2 * pairs`
//!   elements: a plain `m x k` bf16 matrix with row stride `2 * pairs`; or, for an `A` stored
//!   as its transpose (the weight gradients' `dy^T`), that layout of `A^T`, read by oneDNN at
//!   strides `(1, ld)`, which spares the interleaving of strided columns into panels;
//! - `B`: panels of `NR = 32` columns of pair words, which for `k` a multiple of 32 is
//!   oneDNN's blocked weights layout `BA16a32b2a` (blocks of 32 columns, within them blocks of
//!   16 pairs of rows, each pair's 32 columns of two bf16 values), zeros past `n` included;
//! - `C`: f32 rows at stride `rs`; `alpha` is the primitive's output scale and `accumulate` a
//!   `sum` post-op.
//!
//! A primitive is made once per shape (and alpha, accumulation and strides) and cached. Each
//! call passes its own scratch memory (`scratchpad_mode = user`), so that threads may run
//! primitives at the same time, and sets the number of OpenMP threads of the calling thread:
//! all of them when `parallel`, else one (a product inside a task already on the threads).

mod library;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, OnceLock};

use library::{library, ExecArg, Handle, Library, MatmulDesc, MemoryDesc};

use super::{Packed, NR};

/// What makes a primitive: sizes, strides, scale and accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    a_strides: (usize, usize),
    c_rs: usize,
    alpha_bits: u32,
    accumulate: bool,
}

/// A matmul primitive and the descriptors of its memories.
struct Primitive {
    /// The library that made it (and destroys it).
    lib: &'static Library,
    handle: Handle,
    src: Box<MemoryDesc>,
    weights: Box<MemoryDesc>,
    dst: Box<MemoryDesc>,
    /// The scratch memory's descriptor and size in bytes, where the primitive needs one.
    scratch: Option<(Box<MemoryDesc>, usize)>,
}

// SAFETY: a oneDNN primitive is immutable once made, and with the scratch memory passed by
// each call (scratchpad_mode = user) its execution from several threads at once is safe; the
// descriptors are plain data.
unsafe impl Send for Primitive {}
// SAFETY: as above.
unsafe impl Sync for Primitive {}

/// The CPU engine (thread-safe in oneDNN), made once.
struct Engine(Handle);
// SAFETY: oneDNN engines may be shared between threads.
unsafe impl Send for Engine {}
// SAFETY: as above.
unsafe impl Sync for Engine {}

thread_local! {
    /// This thread's stream (streams are not shared between threads).
    static STREAM: RefCell<Option<Handle>> = const { RefCell::new(None) };
    /// This thread's scratch memory for the primitives.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The oneDNN version loaded (`major.minor.patch`), or why it cannot be used.
pub(crate) fn version() -> Result<&'static str, &'static str> {
    let lib = library()?;
    engine(lib)?;
    Ok(lib.version.as_str())
}

/// Whether the bf16 products go through oneDNN where it loads: `ROFORMER_ONEDNN=1` yes,
/// `ROFORMER_ONEDNN=0` no, and by default only on a CPU with AMX-BF16 tiles. Without AMX
/// (AMD Zen 4), oneDNN's `vdpbf16ps` kernel measured level with ours product by product
/// (BENCHMARKS.md, "oneDNN"), so ours, which needs nothing installed, stays the default.
pub(crate) fn chosen() -> bool {
    requested() && version().is_ok()
}

/// Whether this process asks for oneDNN's bf16 products: `ROFORMER_ONEDNN` and the CPU as
/// [`chosen`] reads them, without opening the library (so before its OpenMP runtime starts).
pub(crate) fn requested() -> bool {
    requested_by(
        std::env::var("ROFORMER_ONEDNN").ok().as_deref(),
        has_amx_bf16(),
    )
}

/// The rule of [`requested`]: `"1"` yes, `"0"` no, anything else (or unset) where the CPU has
/// AMX-BF16.
fn requested_by(setting: Option<&str>, amx_bf16: bool) -> bool {
    match setting {
        Some("1") => true,
        Some("0") => false,
        _ => amx_bf16,
    }
}

/// Whether the CPU reports AMX-BF16 (CPUID leaf 7, sub-leaf 0, EDX bit 22).
fn has_amx_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID exists on every x86_64 CPU; leaf 7 reads as zeros where unsupported.
        let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
        leaf7.edx & (1 << 22) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The name of the implementation oneDNN picks for an `m x k` by `k x n` product, such as
/// `brg:avx512_core_bf16` or `brg:avx512_core_amx`, or `None` where oneDNN is not here or
/// does not take the shape.
pub(crate) fn implementation(m: usize, n: usize, k: usize) -> Option<String> {
    let lib = library().ok()?;
    let shape = Shape {
        m,
        n,
        k,
        a_strides: (k, 1),
        c_rs: n,
        alpha_bits: 1f32.to_bits(),
        accumulate: false,
    };
    let primitive = primitive(lib, shape)?;
    let mut info: *const c_char = std::ptr::null();
    // SAFETY: `primitive.handle` is live; the query writes a pointer to a string the
    // primitive descriptor owns, which the primitive keeps alive.
    unsafe {
        let mut pd: Handle = null_mut();
        if (lib.dnnl_primitive_get_primitive_desc)(primitive.handle, &mut pd) != 0 {
            return None;
        }
        if (lib.dnnl_primitive_desc_query)(
            pd,
            library::QUERY_IMPL_INFO,
            0,
            (&mut info as *mut *const c_char).cast(),
        ) != 0
            || info.is_null()
        {
            return None;
        }
        Some(CStr::from_ptr(info).to_string_lossy().into_owned())
    }
}

/// Whether oneDNN takes a product of depth `k`: our packed `B` is its blocked layout only when
/// `k` is a multiple of 32 (whole blocks of 16 pairs).
pub(super) fn takes(k: usize) -> bool {
    k > 0 && k.is_multiple_of(2 * 16) && library().is_ok()
}

/// `C = (accumulate ? C : 0) + alpha * A B` through oneDNN, `A`'s bf16 element `(i, kk)` at
/// `i * a.1 + kk * a.2` of the bf16 values held (two a word, the low one first) by `a.0`: rows
/// of `k / 2` words (`(k, 1)`, `pack_panels`' row layout of `A`) or the rows of its transpose
/// (`(1, ld)`, that layout of `A^T`); `B` packed. `false` (nothing written) where oneDNN is not
/// here or refuses the shape, and the caller runs our kernel.
///
/// # Safety
/// As [`super::product`]: `c` is valid for writes of `m` rows of `b.n` elements at row stride
/// `c.1`, touched by no one else during the call, and overlaps neither operand.
pub(super) unsafe fn product(
    m: usize,
    c: (*mut f32, usize),
    accumulate: bool,
    (a_words, a_rs, a_cs): (&[u32], usize, usize),
    b: Packed<'_>,
    alpha: f32,
    parallel: bool,
) -> bool {
    let (n, k) = (b.n, b.k);
    let a_last = (m.max(1) - 1) * a_rs + (k.max(1) - 1) * a_cs;
    if !takes(k)
        || m == 0
        || a_words.len() * 2 <= a_last
        || b.words.len() < n.div_ceil(NR) * NR * k / 2
    {
        return false;
    }
    let Ok(lib) = library() else { return false };
    let shape = Shape {
        m,
        n,
        k,
        a_strides: (a_rs, a_cs),
        c_rs: c.1,
        alpha_bits: alpha.to_bits(),
        accumulate,
    };
    let Some(primitive) = primitive(lib, shape) else {
        return false;
    };
    let threads = if parallel {
        rayon::current_num_threads()
    } else {
        1
    };
    STREAM.with(|stream| {
        let mut stream = stream.borrow_mut();
        let stream = match *stream {
            Some(made) => made,
            None => {
                let Some(made) = new_stream(lib) else {
                    return false;
                };
                *stream = Some(made);
                made
            }
        };
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let bytes = primitive.scratch.as_ref().map_or(0, |(_, bytes)| *bytes);
            if scratch.len() < bytes {
                scratch.resize(bytes, 0);
            }
            // SAFETY: the memories wrap the caller's buffers, which outlive the call and
            // hold what the descriptors say (checked above and by the caller); oneDNN reads
            // `src` and `weights` only.
            unsafe {
                (lib.omp_set_num_threads)(threads as i32);
                execute(
                    lib,
                    &primitive,
                    stream,
                    [
                        a_words.as_ptr() as *mut c_void,
                        b.words.as_ptr() as *mut c_void,
                        c.0.cast(),
                        scratch.as_mut_ptr().cast(),
                    ],
                )
            }
        })
    })
}

/// Runs `primitive` on the four buffers (source, weights, destination, scratch); `false` if
/// oneDNN reports an error.
///
/// # Safety
/// The buffers hold what the primitive's descriptors say.
unsafe fn execute(
    lib: &Library,
    primitive: &Primitive,
    stream: Handle,
    [src, weights, dst, scratch]: [*mut c_void; 4],
) -> bool {
    let Some(engine) = engine(lib).ok() else {
        return false;
    };
    let mut memories: [Handle; 4] = [null_mut(); 4];
    let descs: [&MemoryDesc; 3] = [&primitive.src, &primitive.weights, &primitive.dst];
    let mut ok = true;
    for (memory, (desc, buffer)) in memories
        .iter_mut()
        .zip(descs.into_iter().zip([src, weights, dst]))
    {
        ok &= (lib.dnnl_memory_create)(memory, desc, engine, buffer) == 0;
    }
    if let (true, Some((desc, _))) = (ok, &primitive.scratch) {
        ok &= (lib.dnnl_memory_create)(&mut memories[3], &**desc, engine, scratch) == 0;
    }
    if ok {
        let args = [
            (library::ARG_SRC, memories[0]),
            (library::ARG_WEIGHTS, memories[1]),
            (library::ARG_DST, memories[2]),
            (library::ARG_SCRATCHPAD, memories[3]),
        ]
        .map(|(arg, memory)| ExecArg { arg, memory });
        let count = if memories[3].is_null() { 3 } else { 4 };
        // Once the primitive has run, C is written: a failed wait (a no-op on the CPU's
        // in-order stream) must not send the caller to run the product again on top of it.
        ok = (lib.dnnl_primitive_execute)(primitive.handle, stream, count, args.as_ptr()) == 0;
        if ok {
            (lib.dnnl_stream_wait)(stream);
        }
    }
    for memory in memories.into_iter().filter(|m| !m.is_null()) {
        (lib.dnnl_memory_destroy)(memory);
    }
    ok
}

/// The engine, made once.
fn engine(lib: &Library) -> Result<Handle, &'static str> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut handle: Handle = null_mut();
            // SAFETY: writes one handle.
            let status = unsafe { (lib.dnnl_engine_create)(&mut handle, library::ENGINE_CPU, 0) };
            (status == 0).then_some(Engine(handle))
        })
        .as_ref()
        .map(|e| e.0)
        .ok_or("oneDNN: no CPU engine")
}

/// A new stream on the engine.
fn new_stream(lib: &Library) -> Option<Handle> {
    let engine = engine(lib).ok()?;
    let mut stream: Handle = null_mut();
    // SAFETY: writes one handle; the stream lives as long as its thread.
    let status = unsafe { (lib.dnnl_stream_create)(&mut stream, engine, library::STREAM_IN_ORDER) };
    (status == 0).then_some(stream)
}

/// The most primitives kept: each holds JIT-compiled code, and a server sees as many row counts
/// as request lengths, so the cache is emptied when it reaches this size (a primitive in use
/// lives on until its call ends).
pub(super) const MAX_PRIMITIVES: usize = 256;

/// The cached primitive of `shape`, made on first use; `None` when oneDNN refuses it (also
/// cached, so that the refusal costs once). At most [`MAX_PRIMITIVES`] are kept.
fn primitive(lib: &'static Library, shape: Shape) -> Option<Arc<Primitive>> {
    static CACHE: OnceLock<Mutex<HashMap<Shape, Option<Arc<Primitive>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if cache.len() >= MAX_PRIMITIVES && !cache.contains_key(&shape) {
        cache.clear();
    }
    cache
        .entry(shape)
        .or_insert_with(|| make_primitive(lib, shape).map(Arc::new))
        .clone()
}

impl Drop for Primitive {
    fn drop(&mut self) {
        // SAFETY: the handle was made by `dnnl_primitive_create` and is destroyed once, here;
        // no call uses it any more (each holds an `Arc` to it while it runs).
        unsafe { (self.lib.dnnl_primitive_destroy)(self.handle) };
    }
}

/// The memory descriptors of `shape` (a bf16 source at its strides, bf16 `BA16a32b2a`
/// weights, f32 destination rows) and the matmul's operation descriptor over them.
fn descriptors(lib: &Library, shape: Shape) -> Option<[Box<MemoryDesc>; 3]> {
    let dims = |rows: usize, cols: usize| {
        let mut d = [0i64; 12];
        d[0] = rows as i64;
        d[1] = cols as i64;
        d
    };
    let (mut src, mut weights, mut dst) = (
        MemoryDesc::zeroed(),
        MemoryDesc::zeroed(),
        MemoryDesc::zeroed(),
    );
    // SAFETY: each call fills the struct passed to it, sized as oneDNN 2.x declares it.
    let ok = unsafe {
        (lib.dnnl_memory_desc_init_by_strides)(
            &mut *src,
            2,
            dims(shape.m, shape.k).as_ptr(),
            library::BF16,
            dims(shape.a_strides.0, shape.a_strides.1).as_ptr(),
        ) == 0
            && (lib.dnnl_memory_desc_init_by_tag)(
                &mut *weights,
                2,
                dims(shape.k, shape.n).as_ptr(),
                library::BF16,
                library::TAG_BA16A32B2A,
            ) == 0
            && (lib.dnnl_memory_desc_init_by_strides)(
                &mut *dst,
                2,
                dims(shape.m, shape.n).as_ptr(),
                library::F32,
                dims(shape.c_rs, 1).as_ptr(),
            ) == 0
    };
    ok.then_some([src, weights, dst])
}

/// The primitive descriptor of `shape`'s matmul: output scale `alpha`, a `sum` post-op when
/// accumulating, the caller's scratch memory. The caller destroys it.
fn primitive_desc(lib: &Library, shape: Shape, descs: &[Box<MemoryDesc>; 3]) -> Option<Handle> {
    let engine = engine(lib).ok()?;
    let [src, weights, dst] = descs;
    let mut desc = Box::new(MatmulDesc([0; 2800]));
    // SAFETY: every call writes the structs and handles passed to it, sized as oneDNN 2.x
    // declares them; the attribute and post-ops are destroyed on every path.
    unsafe {
        if (lib.dnnl_matmul_desc_init)(&mut *desc, &**src, &**weights, std::ptr::null(), &**dst)
            != 0
        {
            return None;
        }
        let mut attr: Handle = null_mut();
        if (lib.dnnl_primitive_attr_create)(&mut attr) != 0 {
            return None;
        }
        let mut post_ops: Handle = null_mut();
        let alpha = f32::from_bits(shape.alpha_bits);
        let mut ok =
            (lib.dnnl_primitive_attr_set_scratchpad_mode)(attr, library::SCRATCHPAD_USER) == 0;
        if alpha != 1.0 {
            ok &= (lib.dnnl_primitive_attr_set_output_scales)(attr, 1, 0, &alpha) == 0;
        }
        if shape.accumulate {
            ok &= (lib.dnnl_post_ops_create)(&mut post_ops) == 0
                && (lib.dnnl_post_ops_append_sum)(post_ops, 1.0) == 0
                && (lib.dnnl_primitive_attr_set_post_ops)(attr, post_ops) == 0;
        }
        let mut pd: Handle = null_mut();
        ok = ok
            && (lib.dnnl_primitive_desc_create)(
                &mut pd,
                (&*desc as *const MatmulDesc).cast(),
                attr,
                engine,
                null_mut(),
            ) == 0;
        if !post_ops.is_null() {
            (lib.dnnl_post_ops_destroy)(post_ops);
        }
        (lib.dnnl_primitive_attr_destroy)(attr);
        ok.then_some(pd)
    }
}

/// Makes the matmul primitive of `shape` ([`descriptors`], [`primitive_desc`]), with the
/// descriptor and size of the scratch memory it wants.
fn make_primitive(lib: &'static Library, shape: Shape) -> Option<Primitive> {
    let descs = descriptors(lib, shape)?;
    let pd = primitive_desc(lib, shape, &descs)?;
    // SAFETY: `pd` is live until destroyed below; the scratch descriptor it returns is copied
    // before that.
    unsafe {
        let scratch_desc = (lib.dnnl_primitive_desc_query_md)(pd, library::QUERY_SCRATCHPAD_MD, 0);
        let bytes = if scratch_desc.is_null() {
            0
        } else {
            (lib.dnnl_memory_desc_get_size)(scratch_desc)
        };
        let scratch = (bytes > 0).then(|| {
            let mut copy = MemoryDesc::zeroed();
            std::ptr::copy_nonoverlapping(scratch_desc, &mut *copy, 1);
            (copy, bytes)
        });
        let mut handle: Handle = null_mut();
        let made = (lib.dnnl_primitive_create)(&mut handle, pd) == 0;
        (lib.dnnl_primitive_desc_destroy)(pd);
        let [src, weights, dst] = descs;
        made.then_some(Primitive {
            lib,
            handle,
            src,
            weights,
            dst,
            scratch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::requested_by;

    #[test]
    fn the_setting_wins_over_the_cpu_and_amx_decides_otherwise() {
        for amx in [false, true] {
            assert!(requested_by(Some("1"), amx));
            assert!(!requested_by(Some("0"), amx));
            assert_eq!(requested_by(None, amx), amx);
            assert_eq!(requested_by(Some("yes"), amx), amx);
        }
    }
}
