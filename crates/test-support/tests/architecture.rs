//! ARCHITECTURE.md's two checked rules, run as tests so that drift fails CI: no two files of a
//! crate import each other (`scripts/import_pairs.py`), and the functions over 80 lines are
//! exactly those ARCHITECTURE.md names (`scripts/long_functions.py`). Both scripts need only
//! Python 3's standard library.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `python3 scripts/NAME args` from the root; its status and stdout.
fn script(name: &str, args: &[String]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(root().join("scripts").join(name))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!("python3 scripts/{name} did not start ({e}); it needs Python 3")
        });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), text)
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let crates = std::fs::read_dir(root().join("crates")).unwrap();
    let mut sources: Vec<String> = crates
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|src| src.is_dir())
        .map(|src| src.display().to_string())
        .collect();
    sources.sort();
    assert!(sources.len() >= 8, "{sources:?}");
    for src in sources {
        let (clean, pairs) = script("import_pairs.py", std::slice::from_ref(&src));
        assert!(clean, "{src}: files that import each other:\n{pairs}");
    }
}

#[test]
fn the_long_functions_are_those_architecture_names() {
    let (_, listing) = script("long_functions.py", &[]);
    // Lines `  91 crates/roformer/src/config.rs:498 try_from`, then a count line.
    let long: Vec<(String, String)> = listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (_lines, place, name) = (words.next()?, words.next()?, words.next()?);
            let file = place.split(':').next()?;
            let within = file.split("/src/").nth(1)?;
            Some((within.to_string(), name.to_string()))
        })
        .collect();
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat
        .find("functions over 80 lines (")
        .expect("ARCHITECTURE.md names them");
    let end = start + flat[start..].find(')').expect("a closing parenthesis");
    let named = &flat[start..end];
    for (file, name) in &long {
        let mention = format!("`{file}`'s `{name}`");
        assert!(
            named.contains(&mention),
            "ARCHITECTURE.md does not name {mention}: {named}"
        );
    }
    let mentions = named.matches("'s `").count();
    assert_eq!(
        mentions,
        long.len(),
        "ARCHITECTURE.md names {mentions}, the script finds:\n{listing}"
    );
}
