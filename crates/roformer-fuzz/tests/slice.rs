//! A short, deterministic slice of every fuzz target: fixed seed, fixed number of inputs,
//! run by the `roformer-fuzz` binary (so that an abort or stack overflow fails the test
//! instead of killing it). Fails on any panic, crash or hang, printing the input.

use std::path::Path;
use std::process::Command;

fn slice(target: &str, runs: u32) {
    let findings = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
    let out = Command::new(env!("CARGO_BIN_EXE_roformer-fuzz"))
        .args([target, "--runs", &runs.to_string(), "--seed", "1"])
        .arg("--findings")
        .arg(&findings)
        .output()
        .expect("the roformer-fuzz binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fuzzing {target} found problems ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(&format!("{runs} executions")), "{stdout}");
}

#[test]
fn config() {
    slice("config", 400);
}

#[test]
fn vocab() {
    slice("vocab", 400);
}

#[test]
fn safetensors() {
    slice("safetensors", 400);
}

#[test]
fn pickle() {
    slice("pickle", 400);
}

#[test]
fn input() {
    slice("input", 400);
}
