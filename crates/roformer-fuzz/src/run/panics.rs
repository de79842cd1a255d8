//! The worker's panic hook: records where the first panic of an input happened (in any
//! thread: rayon re-raises its workers' panics in the caller) instead of printing it.

use std::backtrace::Backtrace;
use std::collections::HashSet;
use std::panic::PanicHookInfo;
use std::sync::{Mutex, MutexGuard};

use super::protocol::PanicReport;

static LAST: Mutex<Option<PanicReport>> = Mutex::new(None);
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Replaces the default hook (which prints) by one that records the panic.
pub fn install() {
    std::panic::set_hook(Box::new(record));
}

/// Forgets the last panic: call before each input.
pub fn clear() {
    *lock(&LAST) = None;
}

/// The first panic since [`clear`], if any.
pub fn take() -> Option<PanicReport> {
    lock(&LAST).take()
}

fn record(info: &PanicHookInfo<'_>) {
    let location = info
        .location()
        .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
        .unwrap_or_else(|| "<unknown>".into());
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic payload>".into());
    let first_time = lock(&SEEN)
        .get_or_insert_with(HashSet::new)
        .insert(location.clone());
    let backtrace = if first_time {
        without_std_frames(&Backtrace::force_capture().to_string())
    } else {
        String::new()
    };
    let mut last = lock(&LAST);
    if last.is_none() {
        *last = Some(PanicReport {
            location,
            message,
            backtrace,
        });
    }
}

/// The frames of a rendered backtrace whose source is not the standard library's (or that
/// have no source line), at most 24 of them.
fn without_std_frames(rendered: &str) -> String {
    let mut frames: Vec<Vec<&str>> = Vec::new();
    for line in rendered.lines() {
        if line.trim_start().starts_with("at ") {
            if let Some(frame) = frames.last_mut() {
                frame.push(line);
            }
        } else {
            frames.push(vec![line]);
        }
    }
    frames
        .into_iter()
        .filter(|f| {
            !f.iter()
                .any(|l| l.contains("/rustc/") || l.contains("src/run/panics.rs"))
        })
        .filter(|f| !f[0].contains("std::panicking") && !f[0].contains("core::panicking"))
        .take(24)
        .map(|f| f.join("\n"))
        .collect::<Vec<_>>()
        .join("\n")
}
