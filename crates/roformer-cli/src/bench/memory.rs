//! Resident memory and CPU time of this process, from Linux's `/proc/self`.

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

/// The CPU time this process (all its threads) has used, user and system, in seconds, from
/// `/proc/self/stat` (clock ticks of 1/100 s, Linux's `USER_HZ`).
///
/// # Errors
/// Off Linux, or when the file cannot be parsed.
pub fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // field 3, utime 14 and stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("parsing /proc/self/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        let f = fields.get(i).context("short /proc/self/stat")?;
        Ok(f.parse::<u64>().with_context(|| format!("parsing {f:?}"))? as f64)
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
