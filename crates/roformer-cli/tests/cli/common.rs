//! Helpers shared by the end-to-end tests.

use std::process::{Command, Output};

/// Runs the `roformer` binary built for this test run with `args`.
pub fn roformer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(args)
        .output()
        .expect("the roformer binary runs")
}
