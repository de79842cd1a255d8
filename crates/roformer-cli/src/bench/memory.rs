//! Resident memory of this process, from Linux's `/proc/self/status`.

use anyhow::Context;

/// A resident-set figure of this process (`VmRSS:`, `VmHWM:`, ...) from `/proc/self/status`,
/// in bytes.
///
/// # Errors
/// Off Linux, or when the field is missing or unreadable.
pub fn proc_status(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("memory is read from /proc/self/status (Linux only)")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kib: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("parsing {line:?}"))?;
    Ok(kib * 1024)
}

/// Resets the peak resident-set size (`VmHWM`) to the current one.
///
/// # Errors
/// Off Linux, or when `/proc/self/clear_refs` cannot be written.
pub fn reset_peak() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .context("resetting VmHWM via /proc/self/clear_refs")
}
