//! The worker process: runs a target on the inputs it reads from stdin, one at a time, under a
//! memory limit, and answers each with a [`Reply`]. An abort or a stack overflow ends the
//! process; the fuzzer sees the pipe close and knows which input did it.

use std::fs::File;
use std::io::{self, BufReader};
use std::os::fd::FromRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::panics;
use super::protocol::{read_frame, write_frame, Reply};
use crate::targets::{process_scratch, Target};

/// Serves inputs until stdin closes.
///
/// # Errors
/// I/O errors of the pipes or of the process setup.
pub fn serve(target: Target, mem_mb: u64) -> io::Result<()> {
    limit_memory(mem_mb)?;
    let mut replies = private_stdout()?;
    panics::install();
    let mut inputs = BufReader::new(io::stdin().lock());
    while let Some(data) = read_frame(&mut inputs)? {
        let reply = run_one(target, &data);
        let json = serde_json::to_vec(&reply).map_err(io::Error::other)?;
        write_frame(&mut replies, &json)?;
    }
    let _ = std::fs::remove_dir_all(process_scratch());
    Ok(())
}

/// Runs one input, catching a panic.
pub fn run_one(target: Target, data: &[u8]) -> Reply {
    panics::clear();
    match catch_unwind(AssertUnwindSafe(|| target.run(data))) {
        Ok(outcome) => Reply::Outcome(outcome),
        Err(payload) => Reply::Panic(panics::take().unwrap_or_else(|| {
            super::protocol::PanicReport {
                location: "<unknown>".into(),
                message: payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                backtrace: String::new(),
            }
        })),
    }
}

/// Caps the address space at `mem_mb` MiB (an allocation past it fails, which Rust turns
/// into an abort the fuzzer records) and turns off core dumps.
///
/// # Errors
/// When `setrlimit` refuses.
pub fn limit_memory(mem_mb: u64) -> io::Result<()> {
    let bytes = mem_mb.saturating_mul(1 << 20) as libc::rlim_t;
    for (resource, limit) in [(libc::RLIMIT_AS, bytes), (libc::RLIMIT_CORE, 0)] {
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: `setrlimit` reads the struct we pass by pointer during the call only.
        if unsafe { libc::setrlimit(resource, &rlimit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The replies' channel: the process's original stdout, while file descriptor 1 is pointed
/// at stderr so that anything the code under test prints cannot corrupt the protocol.
fn private_stdout() -> io::Result<File> {
    // SAFETY: `dup` and `dup2` take and return plain descriptors; 1 and 2 are open (the
    // fuzzer made them pipes).
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor `dup` just returned, owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}
