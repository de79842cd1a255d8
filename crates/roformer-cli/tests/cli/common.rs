//! Helpers shared by the end-to-end tests.

use std::ffi::OsStr;
use std::fmt::Debug;
use std::process::{Command, Output};

/// Runs the `roformer` binary built for this test run with `args`.
pub fn roformer<S: AsRef<OsStr> + Debug>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(args)
        .output()
        .expect("the roformer binary runs")
}

/// Runs `roformer` with `args`, asserting that it succeeds (showing its stderr if not).
pub fn roformer_ok<S: AsRef<OsStr> + Debug>(args: &[S]) -> Output {
    let out = roformer(args);
    assert!(
        out.status.success(),
        "roformer {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The rows of a bench table below its title and header lines, split on whitespace.
pub fn table_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Runs `command` followed by each of `cases`, asserting that every run fails with a
/// non-zero status and a message that says `error`.
pub fn assert_each_fails(command: &[&str], cases: &[&[&str]]) {
    for args in cases {
        let all: Vec<&str> = command.iter().chain(args.iter()).copied().collect();
        let out = roformer(&all);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
    }
}

/// Runs `roformer ARGS`, halves `file` `delay_ms` into the run (a concurrent writer truncating
/// what the command reads), and returns the stderr after checking that the process ended with
/// an exit code: a signal (SIGBUS from a mapped file) leaves none.
pub fn run_while_truncating(
    args: &[&str],
    file: &std::path::Path,
    delay_ms: u64,
) -> (bool, String) {
    let len = std::fs::metadata(file).unwrap().len();
    let child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(delay_ms));
    let writer = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    writer.set_len(len / 2).unwrap();
    let result = child.wait_with_output().unwrap();
    assert!(
        result.status.code().is_some(),
        "{delay_ms} ms: {:?}",
        result.status
    );
    (
        result.status.success(),
        String::from_utf8_lossy(&result.stderr).into_owned(),
    )
}
