//! The crates' `examples/` folders: each program is short (under 60 lines, a reader's page)
//! and CI runs it (`.ci/run` runs `target/debug/examples/NAME`, the binary `cargo test
//! --workspace` builds; the names are unique across the crates, as that one folder needs).

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `(crate, example name, lines)` of every `crates/*/examples/*.rs`.
fn examples() -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(files) = std::fs::read_dir(dir.join("examples")) else {
            continue;
        };
        let package = dir.file_name().unwrap().to_string_lossy().into_owned();
        for file in files {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                found.push((package.clone(), name, lines));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_example_is_short_and_run_by_ci() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let examples = examples();
    assert!(examples.len() >= 4, "{examples:?}");
    let mut names: Vec<&str> = examples.iter().map(|(_, name, _)| name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        examples.len(),
        "two crates share an example name: {examples:?}"
    );
    for (package, name, lines) in &examples {
        assert!(
            *lines < 60,
            "{package}/examples/{name}.rs has {lines} lines"
        );
        let binary = format!("target/debug/examples/{name}");
        let run = ci.lines().any(|line| line.trim() == binary);
        assert!(
            run,
            ".ci/run does not run {package}'s example {name} ({binary})"
        );
    }
}
