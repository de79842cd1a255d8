//! The built-in Fashion-MNIST model and the vision commands around it: `vision eval`,
//! `vision classify`, `vision embed` (no `--model`), and `vision train` on the committed subset.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{roformer, roformer_ok};
use test_support::Scratch;

/// The committed Fashion-MNIST subset (gzipped IDX files).
fn subset() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/images/fashion-mnist")
}

/// A committed test image (28 x 28 grey PNG) by name.
fn image(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images");
    path.join(format!("{name}.png")).display().to_string()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `vision eval --json` of the model in `model` on the Fashion-MNIST files in `data`.
fn eval_report(model: &Path, data: &str) -> Value {
    let model = model.to_str().unwrap();
    let args = ["vision", "eval", "--model", model, "--data", data, "--json"];
    serde_json::from_str(&stdout(&roformer_ok(&args))).unwrap()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-vision", name)
}

#[test]
fn eval_of_the_built_in_model_on_the_subset_is_near_its_model_card() {
    let data = subset().display().to_string();
    for size in ["28", "56"] {
        let out = roformer_ok(&["vision", "eval", "--data", &data, "--size", size, "--json"]);
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        let images = report["images"].as_u64().unwrap();
        let accuracy = report["accuracy"].as_f64().unwrap();
        assert!(images >= 100, "{report}");
        // The model card: 92.5 % (28) and 93.4 % (56) on all 10,000; 80 % leaves room for a
        // few hundred images' noise and fails for a broken model (chance is 10 %).
        assert!(accuracy > 0.8, "size {size}: {report}");
        assert_eq!(report["per_class"].as_array().unwrap().len(), 10);
    }
}

#[test]
fn classify_names_the_garments_of_the_readme() {
    let cases = [
        ("ankle-boot", "Ankle boot"),
        ("trouser", "Trouser"),
        ("bag", "Bag"),
    ];
    let paths: Vec<String> = cases.iter().map(|(n, _)| image(n)).collect();
    let mut args = vec!["vision", "classify", "--json"];
    args.extend(paths.iter().map(String::as_str));
    let out = roformer_ok(&args);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (line, (_, label)) in lines.iter().zip(cases) {
        let labels = line["labels"].as_array().unwrap();
        assert_eq!(labels.len(), 5);
        assert_eq!(labels[0]["label"], label, "{line}");
        let scores: Vec<f64> = labels
            .iter()
            .map(|l| l["score"].as_f64().unwrap())
            .collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        assert!(scores.iter().sum::<f64>() <= 1.0 + 1e-6);
    }
}

#[test]
fn embed_writes_one_pooled_vector_per_image() {
    let dir = scratch("embed");
    let npy = dir.join("vectors.npy");
    let boot = image("ankle-boot");
    let bag = image("bag");
    roformer_ok(&[
        "vision",
        "embed",
        &boot,
        &bag,
        "--output",
        npy.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let header = String::from_utf8_lossy(&bytes[10..128]);
    assert!(header.contains("'shape': (2, 192)"), "{header}");
    let out = roformer_ok(&["vision", "embed", &boot]);
    let line: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let v = line["embedding"].as_array().unwrap();
    assert_eq!(v.len(), 192);
    assert!(v.iter().all(|x| x.as_f64().unwrap().is_finite()));
}

#[test]
fn bad_images_get_a_clear_error() {
    let dir = scratch("bad");
    let truncated = dir.join("truncated.png");
    let bytes = std::fs::read(image("bag")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let text = dir.join("not-an-image.png");
    std::fs::write(&text, "hello").unwrap();
    for path in [&truncated, &text, &dir.join("missing.png")] {
        let out = roformer(&["vision", "classify", path.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(path.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn train_runs_on_the_subset_and_its_checkpoint_evaluates() {
    let dir = scratch("train");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 64, "patch_size": 4, "num_channels": 1, "image_size": 28,
            "num_register_tokens": 1, "num_labels": 10, "layerscale_value": 0.1}"#,
    )
    .unwrap();
    let out_dir = dir.join("run");
    let data = subset().display().to_string();
    let run = out_dir.to_str().unwrap();
    let common = [
        "vision",
        "train",
        "--data",
        &data,
        "--config",
        config.to_str().unwrap(),
        "--out",
        run,
        "--batch-size",
        "32",
        "--warmup",
        "2",
        // A constant rate after the warm-up: a 3-step run continued to 6 and a 6-step run
        // take the same rates, so their weights can be compared.
        "--decay",
        "constant",
        "--eval-every",
        "3",
        "--save-every",
        "3",
    ];
    let mut first = common.to_vec();
    first.extend(["--steps", "3"]);
    roformer_ok(&first);
    let checkpoint = out_dir.join("checkpoint");
    for file in [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ] {
        assert!(checkpoint.join(file).is_file(), "{file}");
    }
    // The same run continued to 6 steps, then its checkpoint through `vision eval`.
    let mut resumed = common.to_vec();
    resumed.extend(["--steps", "6", "--resume"]);
    roformer_ok(&resumed);
    let metrics = std::fs::read_to_string(out_dir.join("metrics.jsonl")).unwrap();
    let steps = metrics
        .lines()
        .filter(|l| l.contains(r#""event":"step""#))
        .count();
    assert_eq!(steps, 6, "{metrics}");
    let report = eval_report(&checkpoint, &data);
    assert!(report["accuracy"].as_f64().unwrap() >= 0.0);
    // A second run into the same directory is refused without --resume.
    let again = roformer(&first);
    assert!(!again.status.success());
}

#[test]
fn train_continues_the_built_in_weights_with_init_in_bf16() {
    let dir = scratch("init");
    let assets =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer-builtin/assets/fashion-model");
    let out_dir = dir.join("run");
    let data = subset().display().to_string();
    let out = roformer_ok(&[
        "vision",
        "train",
        "--data",
        &data,
        "--init",
        assets.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--steps",
        "2",
        "--batch-size",
        "16",
        "--warmup",
        "0",
        "--lr",
        "1e-5",
        "--precision",
        "bf16",
    ]);
    assert!(out.status.success());
    // A tiny learning rate keeps the continued model close to the built-in one: well above
    // chance on the subset's test images (the built-in model scores over 80 % there).
    let checkpoint = out_dir.join("checkpoint");
    let report = eval_report(&checkpoint, &data);
    assert!(report["accuracy"].as_f64().unwrap() > 0.7, "{report}");
}
