//! oneDNN 2.x loaded at run time: the handful of its C functions the bf16 products call.
//!
//! The library is opened with `dlopen` the first time a product asks for it (`libdnnl.so.2`,
//! Debian's `libdnnl2`; or the file named by `ROFORMER_ONEDNN_LIBRARY`), so that a machine
//! without it runs our own kernel and nothing else changes. Its version is checked: the C
//! API of oneDNN 2.x (memory and operation descriptors as structs filled in place) is the one
//! declared here; 3.x changed it, and is refused.
//!
//! The OpenMP runtime oneDNN is built with (`libgomp`, Debian's build) is reached through the
//! same handle, for `omp_set_num_threads`: each call sets how many threads the calling
//! thread's next product uses.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::sync::OnceLock;

/// `dnnl_status_t`: 0 is success.
pub(super) type Status = c_int;
/// `dnnl_dim_t`.
pub(super) type Dim = i64;
/// An opaque handle (`dnnl_engine_t`, `dnnl_stream_t`, `dnnl_primitive_t`, ...).
pub(super) type Handle = *mut c_void;

/// `dnnl_memory_desc_t` of oneDNN 2.x: a 696-byte struct the library fills in place.
#[repr(C, align(8))]
pub(super) struct MemoryDesc(pub(super) [u8; 696]);

impl MemoryDesc {
    /// An all-zero descriptor, to be initialised by the library.
    pub(super) fn zeroed() -> Box<MemoryDesc> {
        Box::new(MemoryDesc([0; 696]))
    }
}

/// `dnnl_matmul_desc_t` of oneDNN 2.x (2,800 bytes).
#[repr(C, align(8))]
pub(super) struct MatmulDesc(pub(super) [u8; 2800]);

/// `dnnl_exec_arg_t`: an argument index and its memory.
#[repr(C)]
pub(super) struct ExecArg {
    pub(super) arg: c_int,
    pub(super) memory: Handle,
}

/// `dnnl_data_type_t` values.
pub(super) const BF16: c_int = 2;
pub(super) const F32: c_int = 3;
/// `dnnl_format_tag_t` values: plain rows, and the blocked weights layout of our packed
/// operand (see `super`).
pub(super) const TAG_BA16A32B2A: c_int = 378;
/// `dnnl_cpu`.
pub(super) const ENGINE_CPU: c_int = 1;
/// `dnnl_stream_in_order` (the default flags).
pub(super) const STREAM_IN_ORDER: c_uint = 1;
/// `dnnl_scratchpad_mode_user`: the caller passes the scratch memory.
pub(super) const SCRATCHPAD_USER: c_int = 1;
/// `dnnl_query_t` values.
pub(super) const QUERY_IMPL_INFO: c_int = 8;
pub(super) const QUERY_SCRATCHPAD_MD: c_int = 136;
/// `DNNL_ARG_*` values.
pub(super) const ARG_SRC: c_int = 1;
pub(super) const ARG_WEIGHTS: c_int = 33;
pub(super) const ARG_DST: c_int = 17;
pub(super) const ARG_SCRATCHPAD: c_int = 80;

/// The leading fields of `dnnl_version_t` (the only ones read).
#[repr(C)]
struct Version {
    major: c_int,
    minor: c_int,
    patch: c_int,
}

/// Declares the table of functions and the code that resolves each by name.
macro_rules! functions {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The library's functions used here, resolved once.
        #[allow(non_snake_case)]
        pub(super) struct Library {
            $(pub(super) $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            /// `omp_set_num_threads` of the OpenMP runtime oneDNN uses.
            pub(super) omp_set_num_threads: unsafe extern "C" fn(c_int),
            /// The oneDNN version, `major.minor.patch`.
            pub(super) version: String,
        }

        impl Library {
            /// Resolves every function in `handle` (from `dlopen`).
            ///
            /// # Safety
            /// `handle` is a live `dlopen` handle of oneDNN 2.x, never closed.
            unsafe fn resolve(handle: Handle, version: String) -> Result<Library, String> {
                Ok(Library {
                    $($name: std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                        symbol(handle, stringify!($name))?
                    ),)*
                    omp_set_num_threads: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int)>(
                        symbol(handle, "omp_set_num_threads")?
                    ),
                    version,
                })
            }
        }
    };
}

functions! {
    dnnl_engine_create: fn(*mut Handle, c_int, usize) -> Status;
    dnnl_stream_create: fn(*mut Handle, Handle, c_uint) -> Status;
    dnnl_memory_desc_init_by_strides: fn(*mut MemoryDesc, c_int, *const Dim, c_int, *const Dim) -> Status;
    dnnl_memory_desc_init_by_tag: fn(*mut MemoryDesc, c_int, *const Dim, c_int, c_int) -> Status;
    dnnl_memory_desc_get_size: fn(*const MemoryDesc) -> usize;
    dnnl_matmul_desc_init: fn(*mut MatmulDesc, *const MemoryDesc, *const MemoryDesc, *const MemoryDesc, *const MemoryDesc) -> Status;
    dnnl_primitive_attr_create: fn(*mut Handle) -> Status;
    dnnl_primitive_attr_destroy: fn(Handle) -> Status;
    dnnl_primitive_attr_set_scratchpad_mode: fn(Handle, c_int) -> Status;
    dnnl_primitive_attr_set_output_scales: fn(Handle, Dim, c_int, *const f32) -> Status;
    dnnl_primitive_attr_set_post_ops: fn(Handle, Handle) -> Status;
    dnnl_post_ops_create: fn(*mut Handle) -> Status;
    dnnl_post_ops_destroy: fn(Handle) -> Status;
    dnnl_post_ops_append_sum: fn(Handle, f32) -> Status;
    dnnl_primitive_desc_create: fn(*mut Handle, *const c_void, Handle, Handle, Handle) -> Status;
    dnnl_primitive_desc_destroy: fn(Handle) -> Status;
    dnnl_primitive_desc_query: fn(Handle, c_int, c_int, *mut c_void) -> Status;
    dnnl_primitive_desc_query_md: fn(Handle, c_int, c_int) -> *const MemoryDesc;
    dnnl_primitive_create: fn(*mut Handle, Handle) -> Status;
    dnnl_primitive_destroy: fn(Handle) -> Status;
    dnnl_primitive_get_primitive_desc: fn(Handle, *mut Handle) -> Status;
    dnnl_memory_create: fn(*mut Handle, *const MemoryDesc, Handle, *mut c_void) -> Status;
    dnnl_memory_destroy: fn(Handle) -> Status;
    dnnl_primitive_execute: fn(Handle, Handle, c_int, *const ExecArg) -> Status;
    dnnl_stream_wait: fn(Handle) -> Status;
}

/// The symbol `name` in `handle`, or why not.
///
/// # Safety
/// `handle` is a live `dlopen` handle.
unsafe fn symbol(handle: Handle, name: &str) -> Result<*mut c_void, String> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let found = libc::dlsym(handle, c_name.as_ptr());
    if found.is_null() {
        Err(format!("oneDNN: no symbol {name}"))
    } else {
        Ok(found)
    }
}

/// The file opened: `ROFORMER_ONEDNN_LIBRARY`, else Debian's `libdnnl.so.2`.
fn file_name() -> String {
    std::env::var("ROFORMER_ONEDNN_LIBRARY").unwrap_or_else(|_| "libdnnl.so.2".to_owned())
}

/// oneDNN, opened and resolved on first use, or why it is not here (no library, another
/// major version, a missing symbol, or `ROFORMER_ONEDNN=0`).
pub(super) fn library() -> Result<&'static Library, &'static str> {
    static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();
    LIBRARY
        .get_or_init(open)
        .as_ref()
        .map_err(|why| why.as_str())
}

fn open() -> Result<Library, String> {
    if std::env::var("ROFORMER_ONEDNN").is_ok_and(|v| v == "0") {
        return Err("oneDNN: turned off by ROFORMER_ONEDNN=0".into());
    }
    let name = file_name();
    let c_name = CString::new(name.clone()).map_err(|e| e.to_string())?;
    // SAFETY: dlopen of a file name; the handle is never closed, so every symbol resolved from
    // it stays valid for the life of the process.
    unsafe {
        let handle = libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            return Err(format!("oneDNN: cannot open {name}"));
        }
        let version_fn = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *const Version>(
            symbol(handle, "dnnl_version")?,
        );
        let version = &*version_fn();
        if version.major != 2 {
            return Err(format!(
                "oneDNN: {name} is version {}.{}, and only the 2.x C API is declared here",
                version.major, version.minor
            ));
        }
        Library::resolve(
            handle,
            format!("{}.{}.{}", version.major, version.minor, version.patch),
        )
    }
}
