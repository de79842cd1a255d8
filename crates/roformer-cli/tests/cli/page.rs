//! The page `roformer serve` serves at `/`, in a real browser: `scripts/test_page.mjs` drives
//! Debian's Chromium through playwright-core. Two tests:
//! - against the script's stub server (a unit test of the page alone);
//! - against `roformer serve --port 0 --api-key ...` on the built-in model (end to end).
//!
//! Both need `/usr/bin/chromium`, `node` and `scripts/page-test/node_modules` (installed by
//! `scripts/install_browser_test_deps.sh`, which `.ci/run` calls). Where one is missing they
//! print why and pass without running, except under CI (`CI` set), where they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::serve_child::ServeChild;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the browser test needs and is missing, if anything.
fn missing_dependency() -> Option<String> {
    if !Path::new("/usr/bin/chromium").exists() {
        return Some("/usr/bin/chromium is not installed".into());
    }
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Some("`node` does not run".into());
    }
    let modules = root().join("scripts/page-test/node_modules/playwright-core");
    if !modules.exists() {
        return Some(format!("{} is missing", modules.display()));
    }
    None
}

/// Whether to run: false (with the reason printed) when a dependency is missing outside CI.
fn can_run(test: &str) -> bool {
    let Some(reason) = missing_dependency() else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {reason}; .ci/run installs it with scripts/install_browser_test_deps.sh"
    );
    eprintln!("skipped {test}: {reason} (run scripts/install_browser_test_deps.sh)");
    false
}

/// Runs `scripts/test_page.mjs` with `args`, asserting that it passes and saves `screenshot`.
fn run_page_test(args: &[&str], screenshot: &Path) {
    let _ = std::fs::remove_file(screenshot);
    let out = Command::new("node")
        .arg(root().join("scripts/test_page.mjs"))
        .args(args)
        .arg("--screenshot")
        .arg(screenshot)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "test_page.mjs {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("page test passed"), "{stdout}");
    let size = std::fs::metadata(screenshot).map_or(0, |m| m.len());
    assert!(size > 0, "no screenshot at {}", screenshot.display());
    eprintln!("screenshot: {}", screenshot.display());
}

#[test]
fn page_works_against_the_stub_server() {
    if can_run("page_works_against_the_stub_server") {
        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("page-mock.png");
        run_page_test(&["--mock"], &shot);
    }
}

#[test]
fn page_works_against_roformer_serve() {
    if can_run("page_works_against_roformer_serve") {
        let key = "page-test-key";
        let server = ServeChild::start(&["--api-key", key]);
        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("page-serve.png");
        run_page_test(&["--url", &server.url, "--api-key", key], &shot);
    }
}
