//! `roformer vocab build`, `train mlm`, `train classify` and `classify` end to end on the
//! committed poetry sample (`crates/roformer/tests/fixtures/poetry/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{assert_each_fails, roformer, roformer_ok};
use test_support::Scratch;

pub(crate) fn poetry() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/poetry")
}

/// A fresh scratch directory for one test.
pub(crate) fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-train", name)
}

/// A tiny config (hidden 64, 2 layers) with `position` positions.
pub(crate) fn tiny_config(dir: &Path, position: &str) -> PathBuf {
    sized_config(dir, position, 64)
}

/// A 2-layer config of width `hidden` (4 heads, feed-forward 2 x hidden, no dropout).
pub(crate) fn sized_config(dir: &Path, position: &str, hidden: usize) -> PathBuf {
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

pub(crate) fn vocab(dir: &Path) -> PathBuf {
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

/// The loss of every step a run logged in `out/metrics.jsonl`, in order.
pub(crate) fn step_losses(out: &Path) -> Vec<f64> {
    json_lines(&std::fs::read(out.join("metrics.jsonl")).unwrap())
        .iter()
        .filter(|v| v["event"] == "step")
        .map(|v| v["loss"].as_f64().unwrap())
        .collect()
}

fn summary(stdout: &[u8]) -> Value {
    json_lines(stdout)
        .into_iter()
        .find(|v| v["event"] == "summary")
        .expect("a summary line")
}

/// A `roformer` command line under construction.
#[derive(Clone, Debug)]
pub(crate) struct Args(pub(crate) Vec<String>);

impl Args {
    /// The command line `args`.
    pub(crate) fn new(args: &[&str]) -> Self {
        Self(args.iter().map(|a| a.to_string()).collect())
    }

    /// Sets `flag`'s value (appending the flag when absent).
    pub(crate) fn set(mut self, flag: &str, value: &str) -> Self {
        match self.0.iter().position(|a| a == flag) {
            Some(i) => self.0[i + 1] = value.to_string(),
            None => self.0.extend([flag.to_string(), value.to_string()]),
        }
        self
    }

    /// Appends `extra`.
    pub(crate) fn with(mut self, extra: &[&str]) -> Self {
        self.0.extend(extra.iter().map(|a| a.to_string()));
        self
    }

    /// Drops the value-less flag `flag` (such as `--json`).
    pub(crate) fn without(mut self, flag: &str) -> Self {
        self.0.retain(|a| a != flag);
        self
    }

    /// The arguments, as `roformer` and the assertion helpers take them.
    pub(crate) fn strs(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

/// What most training tests start from, in a fresh scratch directory: a vocabulary built from
/// the poetry sample, a tiny config (hidden 64, 2 layers, rotary) and the sample as corpus.
pub(crate) struct TinyRun {
    pub(crate) dir: Scratch,
    pub(crate) vocab: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) corpus: PathBuf,
}

/// The [`TinyRun`] of the test `name`.
pub(crate) fn tiny_run(name: &str) -> TinyRun {
    let dir = scratch(name);
    TinyRun {
        vocab: vocab(&dir),
        config: tiny_config(&dir, "rotary"),
        corpus: poetry(),
        dir,
    }
}

impl TinyRun {
    /// `train mlm` of `steps` steps into `out` (sequences of 64, batch 8, lr 2e-3, warm-up 10,
    /// seed 3, JSON lines on stdout); change any of them with [`Args::set`].
    pub(crate) fn mlm(&self, out: &Path, steps: &str) -> Args {
        let path = |p: &Path| p.to_str().unwrap().to_string();
        Args::new(&[
            "train",
            "mlm",
            "--config",
            &path(&self.config),
            "--vocab",
            &path(&self.vocab),
            "--corpus",
            &path(&self.corpus),
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
            &path(out),
            "--json",
        ])
    }
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
    // Only what the flags name is written (issue 19, item 6).
    assert!(!dir.join("tokenizer_config.json").exists());
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
    let t = tiny_run("mlm");
    let config = sized_config(&t.dir, "rotary", 128);
    let out = t.dir.join("run");
    let args = t
        .mlm(&out, "300")
        .set("--config", config.to_str().unwrap())
        .set("--corpus", t.corpus.join("songci").to_str().unwrap())
        .set("--batch", "16")
        .set("--weight-decay", "0")
        .set("--validation", "0");
    let run = roformer_ok(&args.strs());
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
    let again = roformer(&args.strs());
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--overwrite"));
}

/// A run stopped after step 4 and resumed to step 8 takes exactly the steps of a run that
/// was never interrupted: same losses, same final weights, bit for bit.
#[test]
fn resume_reproduces_the_uninterrupted_run() {
    let t = tiny_run("resume");
    // With dropout, so that its seeding is part of what must repeat.
    let text = std::fs::read_to_string(&t.config)
        .unwrap()
        .replace("0.0", "0.1");
    std::fs::write(&t.config, text).unwrap();
    let (straight, split) = (t.dir.join("straight"), t.dir.join("split"));
    let run = |out: &Path, extra: &[&str]| {
        roformer_ok(&t.mlm(out, "8").set("--warmup", "2").with(extra).strs())
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
    let losses = step_losses;
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
    let t = tiny_run("ctrlc");
    let out = t.dir.join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(t.mlm(&out, "100000").strs())
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

/// `train mlm --json | head`: when standard output's reader goes, the run stops after the
/// step as SIGTERM would, with its checkpoint saved and `metrics.jsonl` whole, and says so on
/// stderr (it used to panic in `println!` and lose the steps since the last save).
#[test]
fn a_closed_standard_output_stops_the_run_with_its_checkpoint() {
    let t = tiny_run("closed-stdout");
    let out = t.dir.join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(t.mlm(&out, "100000").strs())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the first step: its JSON line gets EPIPE.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{err}");
    assert!(
        err.contains("standard output was closed by its reader")
            && err.contains("is saved")
            && err.contains("--resume")
            && !err.contains("panicked"),
        "{err}"
    );
    let state = std::fs::read_to_string(out.join("checkpoint/trainer_state.json")).unwrap();
    let step = serde_json::from_str::<Value>(&state).unwrap()["step"]
        .as_u64()
        .unwrap();
    assert!((1..100).contains(&step), "stopped at step {step}");
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let steps = metrics
        .lines()
        .filter(|l| l.contains(r#""event":"step""#))
        .count();
    assert_eq!(steps as u64, step, "every step recorded");
}

#[test]
fn a_diverging_run_stops_at_the_bad_step_and_keeps_the_last_good_checkpoint() {
    let t = tiny_run("nan");
    let out = t.dir.join("run");
    // A learning rate of 1e30 sends the weights to inf within a few steps, each saved.
    let args = t
        .mlm(&out, "50")
        .set("--lr", "1e30")
        .set("--warmup", "0")
        .set("--save-every", "1");
    let run = roformer(&args.strs());
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
    let TinyRun {
        dir, vocab, config, ..
    } = tiny_run("bad");
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
    let t = tiny_run("classify");
    let (dir, corpus) = (&t.dir, &t.corpus);
    let pre = dir.join("pre");
    roformer_ok(&t.mlm(&pre, "20").strs());
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
    let t = tiny_run("bf16");
    let dir = &t.dir;
    let config = sized_config(dir, "rotary", 96);
    let run = |out: &Path, extra: &[&str]| {
        let args = t.mlm(out, "8").set("--config", config.to_str().unwrap());
        roformer_ok(&args.set("--warmup", "2").with(extra).strs())
    };
    let losses = step_losses;
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
    let t = tiny_run("alone");
    let blocks = |share: &str, out: &str| -> usize {
        let args = t.mlm(&t.dir.join(out), "2").set("--warmup", "1");
        let out = roformer_ok(&args.without("--json").set("--alone-share", share).strs());
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
    let args = t.mlm(&t.dir.join("d"), "2");
    let out = roformer(
        &args
            .with(&["--alone-share", "0.5", "--line-by-line"])
            .strs(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--alone-share"));
}

/// Every file under `dir` (relative path, bytes), for byte-for-byte comparisons.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, into: &mut Vec<(PathBuf, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, into);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                into.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    files
}

/// `cp -r from to`.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// The steps done that `out`'s checkpoint records.
pub(crate) fn checkpoint_step(out: &Path) -> u64 {
    let text = std::fs::read_to_string(out.join("checkpoint/trainer_state.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["step"]
        .as_u64()
        .unwrap()
}

/// A few labelled examples for `train classify` (two labels told apart by their characters).
pub(crate) fn classify_examples(dir: &Path) -> PathBuf {
    let path = dir.join("examples.jsonl");
    let mut text = String::new();
    for i in 0..12 {
        let (t, label) = if i % 2 == 0 {
            ("床前明月光，疑是地上霜。", "moon")
        } else {
            ("白日依山尽，黄河入海流。", "river")
        };
        text.push_str(&serde_json::json!({"text": t, "label": label}).to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Issue 19, item 1: `--resume` of a copied run trains and saves into the copy, never into the
/// directory its `run.json` recorded (`train mlm`, and `train classify` with its `best/`).
#[test]
fn resuming_a_copied_run_writes_the_copy_and_leaves_the_original_alone() {
    let t = tiny_run("copied");
    let dir = &t.dir;
    let (run, copy) = (dir.join("run"), dir.join("copy"));
    roformer_ok(&t.mlm(&run, "2").set("--warmup", "1").strs());
    copy_dir(&run, &copy);
    let original = snapshot(&run);
    roformer_ok(&[
        "train",
        "mlm",
        "--resume",
        "--steps",
        "4",
        "--out",
        copy.to_str().unwrap(),
        "--json",
    ]);
    assert!(snapshot(&run) == original, "the original run changed");
    assert_eq!(checkpoint_step(&run), 2);
    assert_eq!(checkpoint_step(&copy), 4, "the copy advanced");
    let recorded = std::fs::read_to_string(copy.join("run.json")).unwrap();
    assert!(recorded.contains(copy.to_str().unwrap()), "{recorded}");

    // `train classify`: the copy's best/ is written, the original's stays.
    let examples = classify_examples(dir);
    let (cls, cls_copy) = (dir.join("cls"), dir.join("cls-copy"));
    roformer_ok(&[
        "train",
        "classify",
        "--init",
        run.join("checkpoint").to_str().unwrap(),
        "--train",
        examples.to_str().unwrap(),
        "--eval",
        examples.to_str().unwrap(),
        "--max-length",
        "16",
        "--batch",
        "4",
        "--steps",
        "2",
        "--eval-every",
        "1",
        "--out",
        cls.to_str().unwrap(),
        "--json",
    ]);
    assert!(cls.join("best/model.safetensors").is_file());
    copy_dir(&cls, &cls_copy);
    let original = snapshot(&cls);
    roformer_ok(&[
        "train",
        "classify",
        "--resume",
        "--steps",
        "4",
        "--out",
        cls_copy.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        snapshot(&cls) == original,
        "the original classifier run changed"
    );
    assert_eq!(checkpoint_step(&cls), 2);
    assert_eq!(checkpoint_step(&cls_copy), 4, "the copy advanced");
}

/// Issue 19, item 2: `--overwrite` replaces only a directory that is recognisably a run, and
/// never one that holds an input of the same command.
#[test]
fn overwrite_replaces_only_a_run_and_never_an_input() {
    let t = tiny_run("overwrite");
    let dir = &t.dir;
    let p = t.corpus.to_str().unwrap();
    // A one-step run without warm-up.
    let one_step = |out: &Path| t.mlm(out, "1").set("--warmup", "0");
    let fresh = |out: &Path| {
        let _ = std::fs::remove_dir_all(out);
        roformer_ok(&one_step(out).strs());
    };
    let refused = |args: &[&str], names: &str, kept: &[&Path]| {
        let out = roformer(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(names), "{args:?}: {err}");
        for path in kept {
            assert!(path.exists(), "{args:?} deleted {}", path.display());
        }
    };

    // A directory that holds no run: its first entry is named, nothing is deleted.
    let thesis = dir.join("thesis");
    std::fs::create_dir_all(thesis.join("data")).unwrap();
    std::fs::write(thesis.join("data/points.csv"), "1,2\n").unwrap();
    std::fs::write(thesis.join("thesis.tex"), "\\documentclass{article}\n").unwrap();
    let args = one_step(&thesis).with(&["--overwrite"]);
    let args = args.strs();
    refused(
        &args,
        "data/",
        &[&thesis.join("data/points.csv"), &thesis.join("thesis.tex")],
    );
    std::fs::remove_dir_all(thesis.join("data")).unwrap();
    refused(&args, "thesis.tex", &[&thesis.join("thesis.tex")]);

    // A run with a foreign file beside it.
    let run = dir.join("run");
    fresh(&run);
    std::fs::write(run.join("notes.txt"), "mine\n").unwrap();
    let args = one_step(&run).with(&["--overwrite"]);
    refused(
        &args.strs(),
        "notes.txt",
        &[&run.join("notes.txt"), &run.join("run.json")],
    );
    std::fs::remove_file(run.join("notes.txt")).unwrap();

    // Inputs inside the run's directory.
    let ckpt = run.join("checkpoint");
    let (in_config, in_vocab) = (ckpt.join("config.json"), ckpt.join("vocab.txt"));
    let o = run.to_str().unwrap();
    let args = one_step(&run).set("--config", in_config.to_str().unwrap());
    refused(
        &args.with(&["--overwrite"]).strs(),
        "--config",
        &[&in_config],
    );
    let args = one_step(&run).set("--vocab", in_vocab.to_str().unwrap());
    refused(&args.with(&["--overwrite"]).strs(), "--vocab", &[&in_vocab]);
    let in_corpus = run.join("corpus.txt");
    std::fs::write(&in_corpus, "床前明月光，疑是地上霜。\n").unwrap();
    let args = one_step(&run).set("--corpus", in_corpus.to_str().unwrap());
    refused(
        &args.with(&["--overwrite"]).strs(),
        "--corpus",
        &[&in_corpus],
    );
    std::fs::remove_file(&in_corpus).unwrap();
    let init = [
        "train",
        "mlm",
        "--init",
        ckpt.to_str().unwrap(),
        "--corpus",
        p,
        "--steps",
        "1",
        "--out",
        o,
        "--overwrite",
    ];
    refused(&init, "--init", &[&ckpt.join("model.safetensors")]);
    let examples = classify_examples(dir);
    let in_train = run.join("train.jsonl");
    std::fs::copy(&examples, &in_train).unwrap();
    let pre = dir.join("pre");
    fresh(&pre);
    let pre_ckpt = pre.join("checkpoint");
    let classify = |train: &Path, eval: &Path| {
        roformer(&[
            "train",
            "classify",
            "--init",
            pre_ckpt.to_str().unwrap(),
            "--train",
            train.to_str().unwrap(),
            "--eval",
            eval.to_str().unwrap(),
            "--steps",
            "1",
            "--out",
            o,
            "--overwrite",
        ])
    };
    for (train, eval, flag) in [
        (&in_train, &examples, "--train"),
        (&examples, &in_train, "--eval"),
    ] {
        let out = classify(train, eval);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag), "{err}");
        assert!(in_train.is_file() && ckpt.is_dir(), "{flag}: deleted");
    }
    std::fs::remove_file(&in_train).unwrap();

    // A run, with what killed runs leave, is replaced.
    std::fs::create_dir(run.join(".checkpoint.partial-1")).unwrap();
    std::fs::write(run.join(".run.json.1-0.tmp"), "{").unwrap();
    roformer_ok(&one_step(&run).with(&["--overwrite"]).strs());
    assert!(!run.join(".checkpoint.partial-1").exists());
    assert!(!run.join(".run.json.1-0.tmp").exists());
    assert_eq!(checkpoint_step(&run), 1);
}

/// Issue 19, item 3: a run killed right after any step of a checkpoint save (the test hook
/// `ROFORMER_TEST_ABORT_IN_SAVE` aborts the process there) leaves a checkpoint that `--resume`
/// finds; the resumed run ends with the weights of an uninterrupted one, and no leftovers.
#[test]
fn a_kill_at_any_point_of_a_save_leaves_a_checkpoint_that_resume_continues() {
    let t = tiny_run("savekill");
    let dir = &t.dir;
    let args_for = |out: &Path| {
        t.mlm(out, "4")
            .set("--warmup", "1")
            .set("--save-every", "1")
    };
    let straight = dir.join("straight");
    roformer_ok(&args_for(&straight).strs());
    let weights = |out: &Path| std::fs::read(out.join("checkpoint/model.safetensors")).unwrap();
    for point in ["first-file", "written", "moved-aside", "renamed"] {
        let out = dir.join(point);
        let killed = Command::new(env!("CARGO_BIN_EXE_roformer"))
            .args(args_for(&out).strs())
            .env("ROFORMER_TEST_ABORT_IN_SAVE", format!("2:{point}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&killed.stderr);
        assert!(!killed.status.success(), "{point}: {err}");
        assert!(err.contains("test hook: aborting"), "{point}: {err}");
        // Between the renames there is no checkpoint/: the window the resume must repair.
        assert_eq!(
            out.join("checkpoint").exists(),
            point != "moved-aside",
            "{point}"
        );
        roformer_ok(&[
            "train",
            "mlm",
            "--resume",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(checkpoint_step(&out), 4, "{point}");
        assert!(
            weights(&out) == weights(&straight),
            "{point}: weights differ"
        );
        let leftovers: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".checkpoint."))
            .collect();
        assert!(leftovers.is_empty(), "{point}: {leftovers:?}");
    }
}

/// A `roformer` running in the background, killed if the test fails before it ends.
struct Background(Option<std::process::Child>);

impl Background {
    /// Spawns `roformer args` (stdout discarded, stderr kept).
    fn spawn(args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_roformer"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Self(Some(child))
    }

    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, |c| c.id())
    }

    /// The process, no longer killed on drop.
    fn take(mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits (up to 120 s) until `ready` holds.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(
            started.elapsed().as_secs() < 120,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The highest step logged in `out/metrics.jsonl`.
fn last_logged_step(out: &Path) -> u64 {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["step"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Issue 19, item 4: while a run trains, a second run into its directory (fresh, with
/// `--overwrite`, or `--resume`) is refused with "DIR is in use by process N"; once the first
/// is killed, the kernel has released its lock and `--resume` continues.
#[test]
fn a_second_writer_is_refused_while_a_run_holds_its_directory() {
    let t = tiny_run("lock");
    let out = t.dir.join("run");
    let args = t.mlm(&out, "100000").set("--save-every", "1");
    let args = args.set("--warmup", "0");
    let child = Background::spawn(&args.strs());
    wait_for("the lock", || out.join(".lock").is_file());
    wait_for("a checkpoint", || {
        out.join("checkpoint/trainer_state.json").is_file()
    });
    let in_use = format!("{} is in use by process {}", out.display(), child.id());
    let overwrite = args.clone().with(&["--overwrite"]);
    let o = out.to_str().unwrap();
    let resume = Args::new(&["train", "mlm", "--resume", "--out", o]);
    for second in [&args, &overwrite, &resume] {
        let second = second.strs();
        let refused = roformer(&second);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{second:?}");
        assert!(err.contains(&in_use), "{second:?}: {err}");
        assert!(out.join("run.json").is_file(), "{second:?} deleted the run");
    }
    let mut child = child.take();
    child.kill().unwrap();
    child.wait().unwrap();
    let steps = (last_logged_step(&out) + 2).to_string();
    roformer_ok(&[
        "train", "mlm", "--resume", "--steps", &steps, "--out", o, "--json",
    ]);
    assert_eq!(checkpoint_step(&out).to_string(), steps);
}

/// Issue 19, item 5: SIGTERM (what schedulers and `timeout` send) is handled like Ctrl-C,
/// finishing the step and saving, but exits non-zero with a message; `--resume` continues.
#[test]
fn sigterm_saves_a_checkpoint_and_exits_with_an_error() {
    let t = tiny_run("sigterm");
    let out = t.dir.join("run");
    let child = Background::spawn(&t.mlm(&out, "100000").set("--warmup", "0").strs());
    wait_for("the first step", || last_logged_step(&out) >= 1);
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = child.take().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stopped by SIGTERM") && err.contains("--resume"),
        "{err}"
    );
    let done = checkpoint_step(&out);
    assert!(done >= 1);
    let steps = (done + 2).to_string();
    let o = out.to_str().unwrap();
    roformer_ok(&[
        "train", "mlm", "--resume", "--steps", &steps, "--out", o, "--json",
    ]);
    assert_eq!(checkpoint_step(&out), done + 2);
}
