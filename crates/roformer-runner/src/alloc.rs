//! A warm allocator: for fair benchmarks, and for training.
//!
//! By default glibc serves every allocation above its mmap threshold (128 KiB, rising
//! dynamically up to 32 MiB) with a fresh `mmap` and returns it with `munmap` on free, so an
//! operation that allocates a large output page-faults every page of it on every call. A
//! framework that allocates its outputs (candle) would then be timed mostly on page faults,
//! while code that reuses buffers is not. Raising the mmap and trim thresholds makes freed
//! memory reusable, as in a long-running program; the peer benchmarks
//! (`shared/peers/README.md`) run with the same settings.
//!
//! Training allocates the same large buffers (activations, gradients, packed operands) every
//! step, so it pays the same page faults: a third or more of a step of the experiments'
//! model (`train mlm`, bf16, 32x128 tokens: 0.28-0.29 s a step by default, 0.16-0.18 s warm,
//! on a Zen 4). Memory freed during a run is then kept for the next step rather than returned,
//! so the resident size stays at the run's peak.
//!
//! glibc reads the thresholds at start-up, from the environment, so the training commands and
//! the allocating benchmarks replace themselves once, at start, with a copy that has them set
//! ([`exec_warm`]).

/// The environment that keeps freed memory in the heap: mmap threshold 4 GiB, trim threshold
/// 64 GiB (glibc tunables).
pub const WARM_ENV: [(&str, &str); 2] = [
    ("MALLOC_MMAP_THRESHOLD_", "4294967296"),
    ("MALLOC_TRIM_THRESHOLD_", "68719476736"),
];

/// Whether this process runs with the warm allocator settings (already set by the caller or by
/// [`exec_warm`]).
pub fn is_warm() -> bool {
    WARM_ENV
        .iter()
        .all(|(name, _)| std::env::var_os(name).is_some())
}

/// Replaces this process (same pid, arguments and other environment) with itself under
/// [`WARM_ENV`], unless the settings are already in place or the C library is not glibc on
/// Linux. Returns only when nothing was replaced; when the replacement fails, says so once and
/// the command goes on with the default allocator. Called at the start of `main`, before any
/// other thread exists.
pub fn exec_warm() {
    if is_warm() || !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = match std::env::current_exe() {
            Ok(exe) => std::process::Command::new(exe)
                .args(std::env::args_os().skip(1))
                .envs(WARM_ENV)
                .exec()
                .to_string(),
            Err(e) => e.to_string(),
        };
        eprintln!(
            "note: could not restart with a warm allocator ({error}); going on with the default \
             one (slower: see MALLOC_MMAP_THRESHOLD_ in BENCHMARKS.md)"
        );
    }
}
