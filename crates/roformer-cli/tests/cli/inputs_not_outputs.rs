//! Issue 19, item 6: an output never replaces an input of the same command, and a command
//! writes only what its flags name (`vocab build` no longer writes a `tokenizer_config.json`
//! beside `--out`; `--plot` stays inside `--out`).

use std::path::Path;

use crate::common::{roformer, roformer_ok};
use crate::fill_mask::{model_dir, scratch};
use crate::train::{poetry, tiny_config, vocab};

/// Runs `args`, asserting exit 1 with a message that contains `want`.
fn refused(args: &[&str], want: &str) {
    let out = roformer(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err}");
}

#[test]
fn forward_embed_and_llama_logits_refuse_to_write_over_an_input() {
    let model = model_dir("mlm_gelu", "inputs-model");
    let dir = scratch("inputs-forward");
    let input = dir.join("input.json");
    let ids = r#"{"input_ids": [[7, 10, 11, 8]]}"#;
    std::fs::write(&input, ids).unwrap();
    let weights = model.join("model.safetensors");
    let before = std::fs::read(&weights).unwrap();
    let (m, i) = (model.to_str().unwrap(), input.to_str().unwrap());
    let forward = ["forward", "--model", m, "--input", i, "--output"];
    fn with<'a>(forward: &[&'a str], out: &'a str) -> Vec<&'a str> {
        forward.iter().copied().chain([out]).collect()
    }
    refused(&with(&forward, i), "is the same file as --input");
    // Another spelling of the same file.
    let dotted = dir.join(".").join("input.json");
    refused(
        &with(&forward, dotted.to_str().unwrap()),
        "is the same file as --input",
    );
    refused(
        &with(&forward, weights.to_str().unwrap()),
        "is the same file as --model",
    );
    assert_eq!(std::fs::read_to_string(&input).unwrap(), ids);
    assert_eq!(std::fs::read(&weights).unwrap(), before);
    // A new file in the model directory is not an input.
    let fresh = model.join("out.safetensors");
    roformer_ok(&with(&forward, fresh.to_str().unwrap()));

    let texts = dir.join("texts.jsonl");
    std::fs::write(&texts, "{\"text\": \"ab\"}\n").unwrap();
    let t = texts.to_str().unwrap();
    refused(
        &["embed", "--model", m, "--input", t, "--output", t],
        "is the same file as --input",
    );
    assert_eq!(
        std::fs::read_to_string(&texts).unwrap(),
        "{\"text\": \"ab\"}\n"
    );

    // Checked before the GGUF file is opened, so any path serves.
    let gguf = dir.join("model.gguf");
    std::fs::write(&gguf, "GGUF").unwrap();
    let g = gguf.to_str().unwrap();
    let logits = ["llama", "logits", "--gguf", g, "--input", i, "--output"];
    refused(
        &logits.iter().copied().chain([i]).collect::<Vec<_>>(),
        "is the same file as --input",
    );
    refused(
        &logits.iter().copied().chain([g]).collect::<Vec<_>>(),
        "is the same file as --gguf",
    );
    assert_eq!(std::fs::read_to_string(&gguf).unwrap(), "GGUF");
}

#[test]
fn vocab_build_writes_only_what_its_flags_name() {
    let dir = scratch("inputs-vocab");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, "床前明月光\n疑是地上霜\n").unwrap();
    let config = dir.join("tokenizer_config.json");
    std::fs::write(&config, r#"{"do_lower_case": true}"#).unwrap();
    let out = dir.join("vocab.txt");
    let c = corpus.to_str().unwrap();
    let base = [
        "vocab",
        "build",
        "--corpus",
        c,
        "--size",
        "20",
        "--min-count",
        "1",
    ];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        base.iter().chain(extra).copied().collect()
    }
    roformer_ok(&with(&base, &["--out", out.to_str().unwrap()]));
    assert!(out.is_file());
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        r#"{"do_lower_case": true}"#,
        "the config beside --out is not touched"
    );
    // Asked for by name, it is written.
    let named = dir.join("new_config.json");
    roformer_ok(&with(
        &base,
        &[
            "--out",
            out.to_str().unwrap(),
            "--tokenizer-config",
            named.to_str().unwrap(),
        ],
    ));
    assert!(std::fs::read_to_string(&named)
        .unwrap()
        .contains("do_lower_case"));
    // The corpus itself, or a file under a corpus directory, is never an output.
    refused(&with(&base, &["--out", c]), "is the same file as --corpus");
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("a.txt"), "床前明月光\n").unwrap();
    let t = tree.to_str().unwrap();
    let inside = tree.join("a.txt");
    refused(
        &[
            "vocab",
            "build",
            "--corpus",
            t,
            "--size",
            "20",
            "--min-count",
            "1",
            "--out",
            inside.to_str().unwrap(),
        ],
        "lies inside --corpus",
    );
    assert_eq!(
        std::fs::read_to_string(&corpus).unwrap(),
        "床前明月光\n疑是地上霜\n"
    );
    // The vocabulary can go to standard output, the report then to standard error.
    let piped = roformer_ok(&with(&base, &["--out", "-"]));
    assert!(String::from_utf8_lossy(&piped.stdout).starts_with("[PAD]\n"));
}

#[test]
fn the_loss_plot_stays_inside_out() {
    let dir = scratch("inputs-plot");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let out = dir.join("a/b/run");
    let corpus = poetry();
    for plot in ["../../x.png", "/tmp/roformer-plot-escape.png", "sub/x.png"] {
        refused(
            &[
                "train",
                "mlm",
                "--config",
                config.to_str().unwrap(),
                "--vocab",
                vocab.to_str().unwrap(),
                "--corpus",
                corpus.to_str().unwrap(),
                "--steps",
                "1",
                "--out",
                out.to_str().unwrap(),
                "--plot",
                plot,
            ],
            "without a directory",
        );
    }
    assert!(!dir.join("a/x.png").exists());
    assert!(!Path::new("/tmp/roformer-plot-escape.png").exists());
    assert!(!out.exists(), "refused before anything is created");
}
