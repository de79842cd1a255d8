//! A short, deterministic slice of every fuzz target: fixed seed, fixed number of inputs,
//! run by the `roformer-fuzz` binary (so that an abort or a stack overflow fails the test
//! instead of killing it), stopping at the first panic, crash or hang and printing its input.
//! A 2 GiB address-space cap makes allocations sized by hostile inputs fail fast; the time
//! limit per input only tells a hang from slow progress.

use std::path::Path;
use std::process::Command;

fn slice(target: &str, runs: u32) {
    let findings = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
    let out = Command::new(env!("CARGO_BIN_EXE_roformer-fuzz"))
        .args([target, "--runs", &runs.to_string(), "--seed", "1"])
        .args(["--timeout-s", "30", "--mem-mb", "2048", "--stop-on-finding"])
        .arg("--findings")
        .arg(&findings)
        .output()
        .expect("the roformer-fuzz binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fuzzing {target} found a problem ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(&format!("{runs} executions")), "{stdout}");
}

#[test]
fn config() {
    slice("config", 3000);
}

#[test]
fn vocab() {
    slice("vocab", 600);
}

#[test]
fn safetensors() {
    slice("safetensors", 3000);
}

#[test]
fn pickle() {
    slice("pickle", 500);
}

#[test]
fn input() {
    slice("input", 3000);
}

#[test]
fn gguf() {
    slice("gguf", 1500);
}

#[test]
fn trainer_state() {
    slice("trainer-state", 300);
}

#[test]
fn optimizer() {
    slice("optimizer", 300);
}
