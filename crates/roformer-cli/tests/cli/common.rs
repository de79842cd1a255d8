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
