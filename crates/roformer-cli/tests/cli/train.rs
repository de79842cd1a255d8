//! `roformer vocab build`, `train mlm`, `train classify` and `classify` end to end on the
//! committed poetry sample (`crates/roformer/tests/fixtures/poetry/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{assert_each_fails, roformer, roformer_ok};

fn poetry() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/poetry")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roformer-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tiny config (hidden 64, 2 layers) with `position` positions.
fn tiny_config(dir: &Path, position: &str) -> PathBuf {
    sized_config(dir, position, 64)
}

/// A 2-layer config of width `hidden` (4 heads, feed-forward 2 x hidden, no dropout).
fn sized_config(dir: &Path, position: &str, hidden: usize) -> PathBuf {
    let path = dir.join(format!("config-{position}-{hidden}.json"));
    let inner = 2 * hidden;
    std::fs::write(
        &path,
        format!(
            r#"{{"hidden_size": {hidden}, "num_hidden_layers": 2, "num_attention_heads": 4,
                "intermediate_size": {inner}, "max_position_embeddings": 64,
                "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                "position_embedding_type": "{position}"}}"#
        ),
    )
    .unwrap();
    path
}

fn vocab(dir: &Path) -> PathBuf {
    let out = dir.join("vocab.txt");
    roformer_ok(
        &[
            "vocab build",
            "--corpus",
            poetry().to_str().unwrap(),
            "--size",
            "3000",
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .flat_map(|a| a.split(' '))
        .collect::<Vec<_>>(),
    );
    out
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(stdout: &[u8]) -> Value {
    json_lines(stdout)
        .into_iter()
        .find(|v| v["event"] == "summary")
        .expect("a summary line")
}

fn train_args<'a>(config: &'a str, vocab: &'a str, out: &'a str, steps: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "mlm",
        "--config",
        config,
        "--vocab",
        vocab,
        "--corpus",
        // The corpus path is appended by the caller.
        "--seq-len",
        "64",
        "--batch",
        "8",
        "--steps",
        steps,
        "--lr",
        "2e-3",
        "--warmup",
        "10",
        "--seed",
        "3",
        "--out",
        out,
        "--json",
    ]
    .into_iter()
    .collect()
}

/// Sets `flag`'s value in `args` (appending the flag when absent).
fn set<'a>(args: &mut Vec<&'a str>, flag: &'a str, value: &'a str) {
    match args.iter().position(|a| *a == flag) {
        Some(i) => args[i + 1] = value,
        None => args.extend_from_slice(&[flag, value]),
    }
}

fn with_corpus<'a>(mut args: Vec<&'a str>, corpus: &'a str) -> Vec<&'a str> {
    let at = args.iter().position(|a| *a == "--corpus").unwrap() + 1;
    args.insert(at, corpus);
    args
}

#[test]
fn vocab_build_covers_the_corpus() {
    let dir = scratch("vocab");
    let out = dir.join("vocab.txt");
    let run = roformer_ok(&[
        "vocab",
        "build",
        "--corpus",
        poetry().to_str().unwrap(),
        "--size",
        "3000",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..5], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
    assert_eq!(lines.len() as u64, report["size"].as_u64().unwrap());
    assert!(report["unk_share"].as_f64().unwrap() < 0.001, "{report}");
    assert!(dir.join("tokenizer_config.json").is_file());
    assert_each_fails(
        &["vocab", "build", "--out", out.to_str().unwrap()],
        &[
            &["--corpus", "/nonexistent/corpus.txt"],
            &["--corpus", poetry().to_str().unwrap(), "--size", "3"],
        ],
    );
}

/// The e2e test of training: a small RoFormer (hidden 128, 2 layers) on the 50 Song lyrics
/// of the sample goes from the uniform loss ln(2733) = 7.9 nats to well below the unigram
/// entropy of the corpus, 6.07 nats (the loss of the best context-free predictor), in 300
/// steps: the mean training loss of the last 20 steps must be 0.5 nat under it (measured:
/// about 5.2-5.3). It also writes a checkpoint that `fill-mask` loads, the metrics and the
/// plot.
#[test]
fn train_mlm_learns_past_the_unigram_entropy() {
    let dir = scratch("mlm");
    let vocab = vocab(&dir);
    let config = sized_config(&dir, "rotary", 128);
    let out = dir.join("run");
    let corpus = poetry().join("songci");
    let mut args = with_corpus(
        train_args(
            config.to_str().unwrap(),
            vocab.to_str().unwrap(),
            out.to_str().unwrap(),
            "300",
        ),
        corpus.to_str().unwrap(),
    );
    set(&mut args, "--batch", "16");
    set(&mut args, "--weight-decay", "0");
    set(&mut args, "--validation", "0");
    let run = roformer_ok(&args);
    let s = summary(&run.stdout);
    let entropy = s["unigram_entropy"].as_f64().unwrap();
    let lines = json_lines(&run.stdout);
    let losses: Vec<f64> = lines
        .iter()
        .filter(|v| v["event"] == "step")
        .map(|v| v["loss"].as_f64().unwrap())
        .collect();
    assert_eq!(losses.len(), 300);
    assert!(
        losses[0] > 7.5,
        "the start is near ln(vocab): {}",
        losses[0]
    );
    let tail = losses[280..].iter().sum::<f64>() / 20.0;
    assert!(
        tail < entropy - 0.5,
        "the loss of the last 20 steps, {tail}, is not well below the unigram entropy {entropy}"
    );
    let checkpoint = out.join("checkpoint");
    for file in [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer_config.json",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(checkpoint.join(file).is_file(), "{file}");
    }
    assert!(out.join("loss.png").is_file());
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(
        metrics
            .lines()
            .filter(|l| l.contains("\"event\":\"step\""))
            .count()
            == 300
    );
    let filled = roformer_ok(&[
        "fill-mask",
        "--model",
        checkpoint.to_str().unwrap(),
        "--json",
        "床前明月[MASK]",
    ]);
    let v: Value = serde_json::from_slice(&filled.stdout).unwrap();
    assert_eq!(v["masks"][0]["predictions"].as_array().unwrap().len(), 5);
    // The output directory now holds a run: a second run must not overwrite it silently.
    let again = roformer(&args);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--overwrite"));
}

/// A run stopped after step 4 and resumed to step 8 takes exactly the steps of a run that
/// was never interrupted: same losses, same final weights, bit for bit.
#[test]
fn resume_reproduces_the_uninterrupted_run() {
    let dir = scratch("resume");
    let vocab = vocab(&dir);
    // With dropout, so that its seeding is part of what must repeat.
    let config = tiny_config(&dir, "rotary");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("0.0", "0.1");
    std::fs::write(&config, text).unwrap();
    let corpus = poetry();
    let (straight, split) = (dir.join("straight"), dir.join("split"));
    let run = |out: &Path, extra: &[&str]| {
        let mut args = with_corpus(
            train_args(
                config.to_str().unwrap(),
                vocab.to_str().unwrap(),
                out.to_str().unwrap(),
                "8",
            ),
            corpus.to_str().unwrap(),
        );
        set(&mut args, "--warmup", "2");
        args.extend_from_slice(extra);
        roformer_ok(&args)
    };
    run(&straight, &[]);
    run(&split, &["--stop-after", "4"]);
    let state = std::fs::read_to_string(split.join("checkpoint/trainer_state.json")).unwrap();
    assert!(state.contains("\"step\": 4"), "{state}");
    roformer_ok(&[
        "train",
        "mlm",
        "--resume",
        "--out",
        split.to_str().unwrap(),
        "--json",
    ]);
    let losses = |out: &Path| -> Vec<f64> {
        json_lines(
            std::fs::read_to_string(out.join("metrics.jsonl"))
                .unwrap()
                .as_bytes(),
        )
        .iter()
        .filter(|v| v["event"] == "step")
        .map(|v| v["loss"].as_f64().unwrap())
        .collect()
    };
    assert_eq!(losses(&straight).len(), 8);
    assert_eq!(losses(&straight), losses(&split));
    let weights = |out: &Path| std::fs::read(out.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        weights(&straight) == weights(&split),
        "final weights differ"
    );
}

#[test]
fn ctrl_c_writes_a_checkpoint_and_exits_cleanly() {
    let dir = scratch("ctrlc");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let out = dir.join("run");
    let corpus = poetry();
    let args = with_corpus(
        train_args(
            config.to_str().unwrap(),
            vocab.to_str().unwrap(),
            out.to_str().unwrap(),
            "100000",
        ),
        corpus.to_str().unwrap(),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (up to 120 s) for the first steps to be logged, then interrupt.
    let metrics = out.join("metrics.jsonl");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&metrics)
        .map(|m| m.lines().count() < 2)
        .unwrap_or(true)
    {
        assert!(started.elapsed().as_secs() < 120, "no step logged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let s = summary(&output.stdout);
    assert_eq!(s["outcome"], "stopped");
    let state = std::fs::read_to_string(out.join("checkpoint/trainer_state.json")).unwrap();
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["step"], s["steps"]);
}

#[test]
fn a_diverging_run_stops_at_the_bad_step_and_keeps_the_last_good_checkpoint() {
    let dir = scratch("nan");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let out = dir.join("run");
    let corpus = poetry();
    let mut args = with_corpus(
        train_args(
            config.to_str().unwrap(),
            vocab.to_str().unwrap(),
            out.to_str().unwrap(),
            "50",
        ),
        corpus.to_str().unwrap(),
    );
    // A learning rate of 1e30 sends the weights to inf within a few steps, each saved.
    set(&mut args, "--lr", "1e30");
    set(&mut args, "--warmup", "0");
    set(&mut args, "--save-every", "1");
    let run = roformer(&args);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("non-finite") && err.contains("step"), "{err}");
    assert!(err.contains("last good checkpoint"), "{err}");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("checkpoint/trainer_state.json")).unwrap(),
    )
    .unwrap();
    let bad: u64 = err
        .split("step ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(state["step"].as_u64().unwrap() + 1, bad, "{err}");
}

#[test]
fn train_mlm_refuses_bad_input() {
    let dir = scratch("bad");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let absolute = tiny_config(&dir, "absolute");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    let no_specials = dir.join("bad-vocab.txt");
    std::fs::write(&no_specials, "a\nb\nc\n").unwrap();
    let (c, v, p) = (config.to_str().unwrap(), vocab.to_str().unwrap(), poetry());
    let p = p.to_str().unwrap();
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    assert_each_fails(
        &["train", "mlm", "--out", o, "--overwrite"],
        &[
            &[
                "--config",
                c,
                "--vocab",
                v,
                "--corpus",
                p,
                "--steps",
                "1",
                "--also-lines",
                "1.5",
            ],
            &[
                "--config",
                c,
                "--vocab",
                v,
                "--corpus",
                "/nonexistent",
                "--steps",
                "1",
            ],
            &[
                "--config",
                c,
                "--vocab",
                v,
                "--corpus",
                empty.to_str().unwrap(),
                "--steps",
                "1",
            ],
            &[
                "--config",
                c,
                "--vocab",
                no_specials.to_str().unwrap(),
                "--corpus",
                p,
                "--steps",
                "1",
            ],
            &["--config", c, "--vocab", v, "--corpus", p, "--steps", "0"],
            &[
                "--config", c, "--vocab", v, "--corpus", p, "--steps", "1", "--batch", "0",
            ],
            &[
                "--config",
                absolute.to_str().unwrap(),
                "--vocab",
                v,
                "--corpus",
                p,
                "--steps",
                "1",
                "--seq-len",
                "65",
            ],
            &[
                "--config",
                "/nonexistent.json",
                "--vocab",
                v,
                "--corpus",
                p,
                "--steps",
                "1",
            ],
        ],
    );
    // --resume of a directory without a run.
    let none = dir.join("none");
    std::fs::create_dir_all(&none).unwrap();
    let r = roformer(&["train", "mlm", "--resume", "--out", none.to_str().unwrap()]);
    assert!(!r.status.success());
}

/// Fine-tuning: a classifier of the dynasty (Tang shi vs Song ci) on top of a briefly
/// pre-trained model, its best checkpoint, and `classify` with it.
#[test]
fn train_classify_and_classify() {
    let dir = scratch("classify");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let corpus = poetry();
    let pre = dir.join("pre");
    let args = with_corpus(
        train_args(
            config.to_str().unwrap(),
            vocab.to_str().unwrap(),
            pre.to_str().unwrap(),
            "20",
        ),
        corpus.to_str().unwrap(),
    );
    roformer_ok(&args);
    // Labelled examples: the sample's Song lyrics (ci) and Tang and Song poems (shi), every
    // fifth one held out.
    let (mut train, mut dev) = (String::new(), String::new());
    let mut n = 0;
    for (file, label) in [
        ("quantangshi/poet.tang.0.json", "shi"),
        ("quantangshi/poet.song.0.json", "shi"),
        ("songci/ci.song.0.json", "ci"),
    ] {
        let path = corpus.join(file);
        let poems: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for poem in poems {
            let text: String = poem["paragraphs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect();
            let line = serde_json::json!({"text": text, "label": label}).to_string() + "\n";
            n += 1;
            if n % 5 == 0 {
                dev.push_str(&line)
            } else {
                train.push_str(&line)
            }
        }
    }
    let (train_path, dev_path) = (dir.join("train.jsonl"), dir.join("dev.jsonl"));
    std::fs::write(&train_path, train).unwrap();
    std::fs::write(&dev_path, dev).unwrap();
    let out = dir.join("cls");
    let run = roformer_ok(&[
        "train",
        "classify",
        "--init",
        pre.join("checkpoint").to_str().unwrap(),
        "--train",
        train_path.to_str().unwrap(),
        "--eval",
        dev_path.to_str().unwrap(),
        "--labels",
        "shi,ci",
        "--max-length",
        "64",
        "--batch",
        "16",
        "--steps",
        "40",
        "--lr",
        "1e-3",
        "--eval-every",
        "20",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let s = summary(&run.stdout);
    let eval = &s["last_eval"];
    assert!(eval["macro_f1"].as_f64().is_some(), "{s}");
    // Ci and shi differ in line lengths and vocabulary: far above the chance level 0.5.
    assert!(eval["accuracy"].as_f64().unwrap() > 0.8, "{s}");
    let best = out.join("best");
    assert!(best.join("model.safetensors").is_file());
    let predicted = roformer_ok(&[
        "classify",
        "--model",
        best.to_str().unwrap(),
        "--json",
        "床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。",
    ]);
    let v: Value = serde_json::from_slice(&predicted.stdout).unwrap();
    assert!(v["label"] == "shi" || v["label"] == "ci");
    assert_each_fails(
        &[
            "train",
            "classify",
            "--out",
            dir.join("x").to_str().unwrap(),
        ],
        &[
            &[
                "--init",
                "/nonexistent",
                "--train",
                train_path.to_str().unwrap(),
            ],
            &[
                "--init",
                pre.join("checkpoint").to_str().unwrap(),
                "--train",
                "/nonexistent.jsonl",
            ],
            &[
                "--init",
                pre.join("checkpoint").to_str().unwrap(),
                "--train",
                train_path.to_str().unwrap(),
                "--labels",
                "shi",
            ],
        ],
    );
    assert_each_fails(&["classify"], &[&["--model", "/nonexistent", "text"]]);
}

#[test]
fn bf16_training_tracks_f32_saves_f32_and_resume_may_switch_precision() {
    let dir = scratch("bf16");
    let vocab = vocab(&dir);
    let config = sized_config(&dir, "rotary", 96);
    let corpus = poetry();
    let run = |out: &Path, extra: &[&str]| {
        let mut args = with_corpus(
            train_args(
                config.to_str().unwrap(),
                vocab.to_str().unwrap(),
                out.to_str().unwrap(),
                "8",
            ),
            corpus.to_str().unwrap(),
        );
        set(&mut args, "--warmup", "2");
        args.extend_from_slice(extra);
        roformer_ok(&args)
    };
    let losses = |out: &Path| -> Vec<f64> {
        json_lines(&std::fs::read(out.join("metrics.jsonl")).unwrap())
            .iter()
            .filter(|v| v["event"] == "step")
            .map(|v| v["loss"].as_f64().unwrap())
            .collect()
    };
    let (f32_run, bf16_run, switched) = (dir.join("f32"), dir.join("bf16"), dir.join("switch"));
    run(&f32_run, &[]);
    let out = run(&bf16_run, &["--precision", "bf16"]);
    let native = !String::from_utf8_lossy(&out.stderr).contains("running in f32");
    let (a, b) = (losses(&f32_run), losses(&bf16_run));
    assert_eq!(a.len(), 8);
    // bf16 operands move each loss by about 2^-9 relative per product; over 8 steps of a tiny
    // model the losses stay within 1 % (a broken product would not learn at all).
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 0.01 * x,
            "step {}: f32 {x}, bf16 {y}",
            step + 1
        );
    }
    assert_eq!(
        native,
        a != b,
        "bf16 differs from f32 exactly where it runs"
    );
    // The checkpoint is f32 whatever the precision.
    let header = std::fs::read(bf16_run.join("checkpoint/model.safetensors")).unwrap();
    let header = String::from_utf8_lossy(&header[8..4096.min(header.len())]);
    assert!(
        header.contains("\"F32\"") && !header.contains("BF16"),
        "{header}"
    );
    // Stop in bf16, resume in f32: the run finishes in f32 and records it.
    run(&switched, &["--precision", "bf16", "--stop-after", "4"]);
    roformer_ok(&[
        "train",
        "mlm",
        "--resume",
        "--precision",
        "f32",
        "--out",
        switched.to_str().unwrap(),
        "--json",
    ]);
    let c = losses(&switched);
    assert_eq!(c.len(), 8);
    assert_eq!(&c[..4], &b[..4], "the bf16 half repeats the bf16 run");
    let recorded = std::fs::read_to_string(switched.join("run.json")).unwrap();
    assert!(recorded.contains("\"precision\": \"f32\""), "{recorded}");
}

#[test]
fn alone_share_adds_one_document_blocks_beside_the_packed_ones() {
    let dir = scratch("alone");
    let vocab = vocab(&dir);
    let config = tiny_config(&dir, "rotary");
    let corpus = poetry();
    let blocks = |share: &str, out: &str| -> usize {
        let out = dir.join(out);
        let mut args = with_corpus(
            train_args(
                config.to_str().unwrap(),
                vocab.to_str().unwrap(),
                out.to_str().unwrap(),
                "2",
            ),
            corpus.to_str().unwrap(),
        );
        set(&mut args, "--warmup", "1");
        args.retain(|a| *a != "--json");
        args.extend_from_slice(&["--alone-share", share]);
        let out = roformer_ok(&args);
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        let at = text.find(" training blocks").expect("the data line");
        text[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (packed, mixed, all_alone) = (blocks("0", "a"), blocks("0.5", "b"), blocks("1", "c"));
    // Documents taken out of the packing each get a block of their own: more blocks, and
    // with every document alone, one block per training document.
    assert!(
        packed < mixed && mixed < all_alone,
        "{packed} {mixed} {all_alone}"
    );
    let refused = dir.join("d");
    let mut args = with_corpus(
        train_args(
            config.to_str().unwrap(),
            vocab.to_str().unwrap(),
            refused.to_str().unwrap(),
            "2",
        ),
        corpus.to_str().unwrap(),
    );
    args.extend_from_slice(&["--alone-share", "0.5", "--line-by-line"]);
    let out = roformer(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--alone-share"));
}
