//! `roformer experiment vision` end to end on the committed Fashion-MNIST subset, with a
//! settings file of a few steps: the runs, the sweep's choice, the outputs, the measured
//! properties, and a second command that trains nothing again.

use std::path::{Path, PathBuf};

use serde_json::Value;
use test_support::Scratch;

use crate::common::{roformer, roformer_ok};

fn subset() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = dir.join("../roformer/tests/fixtures/images/fashion-mnist");
    dir.display().to_string()
}

/// A scratch directory holding a small settings file (the committed one with a smaller model
/// and a few steps), that file, and the run's output directory inside it.
fn settings(name: &str, arms: &[&str]) -> (Scratch, PathBuf, PathBuf) {
    let dir = Scratch::new("roformer-expvision", name);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let committed = root.join("experiments/vision/settings.json");
    let mut plan: Value =
        serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    // Smaller still: two layers of width 32 (heads of 16: 4 frequencies per axis).
    plan["model"]["hidden_size"] = 32.into();
    plan["model"]["intermediate_size"] = 64.into();
    plan["model"]["num_hidden_layers"] = 2.into();
    for (key, value) in [
        ("arms", serde_json::json!(arms)),
        ("rates", serde_json::json!([1e-3, 3e-3])),
        ("seeds", serde_json::json!([0, 1])),
        ("steps", 3.into()),
        ("warmup", 1.into()),
        ("batch_size", 16.into()),
        ("eval_sides", serde_json::json!([20, 28, 36])),
        ("test_images", 40.into()),
        ("property_sides", serde_json::json!([28, 36])),
    ] {
        plan[key] = value;
    }
    let path = dir.join("settings.json");
    std::fs::write(&path, plan.to_string()).unwrap();
    let out = dir.join("out");
    (dir, path, out)
}

/// `experiment vision` on the subset with the settings file `settings`, into `out`.
fn command(settings: &Path, out: &Path) -> Vec<String> {
    let paths = [
        subset(),
        out.display().to_string(),
        settings.display().to_string(),
    ];
    let [data, out, settings] = paths;
    [
        "experiment",
        "vision",
        "--data",
        &data,
        "--out",
        &out,
        "--settings",
        &settings,
    ]
    .map(String::from)
    .to_vec()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_vision_experiment_trains_tests_measures_and_reports_then_reuses_its_runs() {
    let (_dir, config, out) = settings("full", &["rope_axial", "rope_flat", "absolute"]);
    let args = command(&config, &out);
    let first = roformer_ok(&args);
    // 3 arms x 2 rates in the sweep, then seed 1 of each at its best rate (seed 0 reused).
    let trained = stderr(&first)
        .lines()
        .filter(|l| l.starts_with("run "))
        .count();
    assert_eq!(trained, 9, "{}", stderr(&first));

    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["sweep"].as_array().unwrap().len(), 6);
    let finals = results["finals"].as_array().unwrap();
    assert_eq!(finals.len(), 6);
    // Each arm's finals share the rate of its best sweep run.
    for arm in ["rope_axial", "rope_flat", "absolute"] {
        let best = results["sweep"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["arm"] == arm)
            .max_by(|a, b| {
                let (a, b) = (
                    a["validation_top1"].as_f64().unwrap(),
                    b["validation_top1"].as_f64().unwrap(),
                );
                // The smaller rate wins a tie: the later (larger) one must be strictly better.
                a.partial_cmp(&b).unwrap().then(std::cmp::Ordering::Greater)
            })
            .unwrap();
        for f in finals.iter().filter(|r| r["arm"] == arm) {
            assert_eq!(f["lr"], best["lr"], "{arm}");
        }
    }
    // Test cells: rotary arms read two ways, absolute one; 3 sides; 2 seeds.
    let test = results["test"].as_array().unwrap();
    assert_eq!(test.len(), (2 * 2 + 1) * 3 * 2);
    for cell in test {
        let top1 = cell["top1"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&top1), "{cell}");
        assert_eq!(cell["images"], 40);
    }
    // At the training side both readings place the patches alike: the same predictions.
    let at28 = |arm: &str, reading: &str, seed: u64| {
        test.iter()
            .find(|c| {
                c["arm"] == arm
                    && c["coordinates"] == reading
                    && c["side"] == 28
                    && c["seed"] == seed
            })
            .unwrap()["top1"]
            .as_f64()
            .unwrap()
    };
    for seed in [0, 1] {
        assert_eq!(
            at28("rope_axial", "indices", seed),
            at28("rope_axial", "interpolated", seed)
        );
    }
    // Relativity: exact for the rotations (f32 kernels), not for a learned absolute table.
    for arm in results["properties"].as_array().unwrap() {
        for grid in arm["grids"].as_array().unwrap() {
            let error = grid["relativity_error"].as_f64().unwrap();
            if arm["arm"] == "absolute" {
                assert!(error > 1e-3, "{arm}");
            } else {
                assert!(error < 1e-4, "{arm}");
                let rotations = &grid["rotations"];
                assert!(rotations["separation"].as_f64().unwrap() > 1e-3, "{arm}");
                assert_eq!(rotations["recovered"], 1.0, "{arm}");
            }
        }
    }
    // The flattened index puts the patch below a row of patches away: farther than the patch
    // to the right, where the axial rotation treats them alike.
    let ratio = |arm: &str| {
        let a = results["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["arm"] == arm)
            .unwrap();
        a["grids"][0]["rotations"]["neighbour_ratio"]
            .as_f64()
            .unwrap()
    };
    assert!(
        (ratio("rope_axial") - 1.0).abs() < 1e-9,
        "{}",
        ratio("rope_axial")
    );
    assert!(ratio("rope_flat") > 1.5, "{}", ratio("rope_flat"));

    let section = std::fs::read_to_string(out.join("section.md")).unwrap();
    for needle in [
        "**Sweep**",
        "**Test top-1 %**",
        "(a) 2D beats",
        "(b) RoPE keeps",
        "(c) mixed",
    ] {
        assert!(section.contains(needle), "{needle}: {section}");
    }
    assert!(
        section.contains(config.to_str().unwrap()),
        "the settings file is cited"
    );
    let png = std::fs::read(out.join("accuracy.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    // The same command again: no run trained, no test repeated, the same results.
    let second = roformer_ok(&args);
    assert!(!stderr(&second).contains("run "), "{}", stderr(&second));
    assert!(!stderr(&second).contains("testing "), "{}", stderr(&second));
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(again["test"], results["test"]);

    // Settings edited between two commands: the runs of the old ones are not reported as the
    // new ones'.
    let mut plan: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    plan["steps"] = 4.into();
    std::fs::write(&config, plan.to_string()).unwrap();
    let refused = roformer(&args);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("was trained with another steps"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn bad_settings_are_refused_before_any_run() {
    let (_dir, config, out) = settings("bad", &["rope_axial", "rope_axial"]);
    let args = command(&config, &out);
    let refused = roformer(&args);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("arms names rope_axial twice"),
        "{}",
        stderr(&refused)
    );
    assert!(!out.join("runs").exists());
}
