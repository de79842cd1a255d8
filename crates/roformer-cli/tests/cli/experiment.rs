//! `roformer experiment {convergence,length,long-docs,linear}` end to end, at toy size on the
//! committed poetry sample (`crates/roformer/tests/fixtures/poetry/`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{roformer, roformer_ok};
use test_support::Scratch;

fn poetry() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/poetry")
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-exp", name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The toy pre-training options: 1 layer of width 16, 6 steps, 2 seeds, a 32-row position
/// table.
fn toy(corpus: &Path, out: &Path) -> Vec<String> {
    [
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seeds",
        "2",
        "--steps",
        "6",
        "--warmup",
        "1",
        "--batch",
        "4",
        "--seq-len",
        "32",
        "--eval-every",
        "3",
        "--eval-batches",
        "2",
        "--hidden",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--vocab-size",
        "400",
        "--max-positions",
        "32",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run(command: &[&str], options: &[String]) -> std::process::Output {
    let mut args: Vec<&str> = command.to_vec();
    args.extend(options.iter().map(String::as_str));
    roformer_ok(&args)
}

/// The arms of a pre-training `results.json`, with the number of seeds each summarises.
fn arms(results: &Value) -> Vec<(String, usize)> {
    results["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["arm"].as_str().unwrap().to_string(),
                a["final_loss"]["values"].as_array().unwrap().len(),
            )
        })
        .collect()
}

#[test]
fn the_four_experiments_run_end_to_end_and_resume() {
    let dir = scratch("all");
    let conv = dir.join("conv");
    run(&["experiment", "convergence"], &toy(&poetry(), &conv));
    let results = read_json(&conv.join("results.json"));
    assert_eq!(
        arms(&results),
        [
            ("rotary".into(), 2),
            ("absolute".into(), 2),
            ("sinusoidal".into(), 2),
            ("none".into(), 2)
        ]
    );
    assert_eq!(results["reference"][0], "absolute");
    let rotary = &results["arms"][0];
    assert_eq!(
        rotary["curve"].as_array().unwrap().len(),
        2,
        "evals at 3 and 6"
    );
    assert!(rotary["final_loss"]["mean"].as_f64().unwrap().is_finite());
    let section = std::fs::read_to_string(conv.join("section.md")).unwrap();
    assert!(section.contains("| rotary |") && section.contains("convergence.png"));
    assert!(
        section.contains("Settings: `experiments/convergence/settings.json`"),
        "{section}"
    );
    assert!(
        std::fs::metadata(conv.join("convergence.png"))
            .unwrap()
            .len()
            > 1000
    );
    let runs = results["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8);
    let seeds = rotary["final_loss"]["values"].as_array().unwrap();
    assert_ne!(seeds[0], seeds[1], "another seed, another run");

    // A second invocation reuses the finished runs (done.json) instead of training again.
    let metrics = conv.join("runs/rotary-s0/metrics.jsonl");
    let before = std::fs::metadata(&metrics).unwrap().modified().unwrap();
    let again = run(&["experiment", "convergence"], &toy(&poetry(), &conv));
    assert!(!String::from_utf8_lossy(&again.stderr).contains("pre-training"));
    assert_eq!(
        std::fs::metadata(&metrics).unwrap().modified().unwrap(),
        before
    );

    // Longer inputs: absolute positions stop at their 32-row table.
    let len = dir.join("len");
    roformer_ok(&[
        "experiment",
        "length",
        "--from",
        conv.to_str().unwrap(),
        "--corpus",
        poetry().to_str().unwrap(),
        "--out",
        len.to_str().unwrap(),
        "--lengths",
        "16,32,64",
        "--tokens",
        "256",
    ]);
    let results = read_json(&len.join("results.json"));
    assert_eq!(results["trained_at"], 32);
    for row in results["rows"].as_array().unwrap() {
        let cells = row["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 3);
        let past = &cells[2]["loss"];
        if row["arm"] == "absolute" {
            assert!(past.is_null(), "absolute at 64 > 32 rows: {past}");
        } else {
            assert_eq!(past["values"].as_array().unwrap().len(), 2, "{row}");
        }
    }
    assert!(len.join("length.png").is_file());

    // Long documents: the classes are the folders tang, song and ci; 3 fine-tuning seeds from
    // the 2 pre-trained ones.
    let classes = collections(&dir);
    let docs = dir.join("docs");
    roformer_ok(&[
        "experiment",
        "long-docs",
        "--from",
        conv.to_str().unwrap(),
        "--corpus",
        classes.to_str().unwrap(),
        "--out",
        docs.to_str().unwrap(),
        "--arms",
        "rotary,absolute",
        "--seeds",
        "3",
        "--lengths",
        "16,32",
        "--poems-per-doc",
        "2",
        "--train-per-class",
        "5",
        "--dev-per-class",
        "3",
        "--dev-poets",
        "0.25",
        "--steps",
        "2",
        "--eval-every",
        "1",
        "--batch",
        "4",
    ]);
    let results = read_json(&docs.join("results.json"));
    let cells = results["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "2 arms x 2 lengths");
    for c in cells {
        let acc = c["accuracy"]["mean"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&acc));
        assert_eq!(c["accuracy"]["values"].as_array().unwrap().len(), 3);
        assert_eq!(c["curve"].as_array().unwrap().len(), 2, "evals at 1 and 2");
    }
    let bases: Vec<(u64, u64)> = results["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["arm"] == "rotary" && r["length"] == 16)
        .map(|r| {
            (
                r["seed"].as_u64().unwrap(),
                r["pretrained_seed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        bases,
        [(0, 0), (1, 1), (2, 0)],
        "seed s from pre-trained s mod 2"
    );
    assert_baselines(&results, "naive Bayes", &[16, 32]);
    let section = std::fs::read_to_string(docs.join("section.md")).unwrap();
    assert!(
        section.contains("| baseline: character naive Bayes"),
        "{section}"
    );
    let train = std::fs::read_to_string(docs.join("data/L16/train.jsonl")).unwrap();
    let dev = std::fs::read_to_string(docs.join("data/L16/dev.jsonl")).unwrap();
    assert_eq!(dev.lines().count(), 9, "3 per class");
    assert!(
        train.lines().all(|l| !dev.contains(l)),
        "no document on both sides"
    );
    assert!(
        docs.join("long-docs-curves-L16.png").is_file()
            && docs.join("long-docs-curves-L32.png").is_file()
    );

    // Linear attention.
    let linear = dir.join("linear");
    run(&["experiment", "linear"], &toy(&poetry(), &linear));
    let results = read_json(&linear.join("results.json"));
    assert_eq!(results["attention"], "linear");
    assert_eq!(
        arms(&results),
        [
            ("rotary".into(), 2),
            ("absolute".into(), 2),
            ("none".into(), 2)
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `results.json` has a cheap baseline at each of `lengths`, whose method names `method`, with
/// an accuracy and macro-F1 in [0, 1].
fn assert_baselines(results: &Value, method: &str, lengths: &[u64]) {
    let baselines = results["baselines"].as_array().unwrap();
    let at: Vec<u64> = baselines
        .iter()
        .map(|b| b["length"].as_u64().unwrap())
        .collect();
    assert_eq!(at, lengths);
    for b in baselines {
        assert!(b["method"].as_str().unwrap().contains(method), "{b}");
        for key in ["accuracy", "macro_f1"] {
            let v = b[key].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{b}");
        }
    }
}

/// The three collections of the poetry sample as `long-docs` reads them: folders `tang`,
/// `song` and `ci` in `dir/classes`.
fn collections(dir: &Path) -> PathBuf {
    let classes = dir.join("classes");
    for (folder, file) in [
        ("tang", "quantangshi/poet.tang.0.json"),
        ("song", "quantangshi/poet.song.0.json"),
        ("ci", "songci/ci.song.0.json"),
    ] {
        std::fs::create_dir_all(classes.join(folder)).unwrap();
        let name = Path::new(file).file_name().unwrap();
        std::fs::copy(poetry().join(file), classes.join(folder).join(name)).unwrap();
    }
    classes
}

/// The poets of a `long-docs` data file's examples.
fn poets_of(jsonl: &str) -> std::collections::BTreeSet<String> {
    jsonl
        .lines()
        .flat_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let poets: Vec<String> = v["poets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect();
            poets
        })
        .collect()
}

#[test]
fn long_docs_authorship_asks_which_candidate_is_the_anchor_poets_and_resumes() {
    let dir = scratch("authorship");
    let conv = dir.join("conv");
    let mut options = toy(&poetry(), &conv);
    let seeds = options.iter().position(|o| o == "--seeds").unwrap();
    options[seeds + 1] = "1".into();
    options.extend(["--arms".to_string(), "rotary,absolute".to_string()]);
    run(&["experiment", "convergence"], &options);
    let classes = collections(&dir);
    let out = dir.join("authorship");
    let long_docs_with = |steps: &str, extra: &[&str]| {
        let mut args = vec![
            "experiment",
            "long-docs",
            "--task",
            "authorship",
            "--from",
            conv.to_str().unwrap(),
            "--corpus",
            classes.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--seeds",
            "2",
            "--lengths",
            "16,32",
            "--poems-per-doc",
            "1",
            "--max-per-poet",
            "3",
            "--train-per-class",
            "4",
            "--dev-per-class",
            "3",
            "--steps",
            steps,
            "--batch",
            "4",
        ];
        args.extend(extra);
        roformer(&args)
    };
    let long_docs = |steps: &str| long_docs_with(steps, &[]);
    // A report before any run: every run pending, none trained, no data written for runs.
    let report = long_docs_with("3", &["--report-only"]);
    assert!(report.status.success(), "{report:?}");
    assert!(!String::from_utf8_lossy(&report.stderr).contains("fine-tuning"));
    let results = read_json(&out.join("results.json"));
    assert_eq!(
        (
            results["pending"].as_u64(),
            results["runs"].as_array().map(Vec::len)
        ),
        (Some(8), Some(0)),
        "2 arms x 2 lengths x 2 seeds pending"
    );
    assert!(!out.join("runs").exists() && !out.join("data").exists());
    assert_baselines(&results, "-gram cosine", &[16, 32]);
    // A run that another process holds (its lock taken here) is left to it: skipped, pending.
    let held = out.join("runs/absolute-L32-s1");
    std::fs::create_dir_all(&held).unwrap();
    let lock = std::fs::File::create(held.join(".lock")).unwrap();
    lock.lock().unwrap();
    let shared = long_docs("3");
    let err = String::from_utf8_lossy(&shared.stderr).to_string();
    assert!(shared.status.success(), "{err}");
    assert!(err.contains("skipped") && err.contains("in use"), "{err}");
    assert_eq!(read_json(&out.join("results.json"))["pending"], 1);
    assert!(!held.join("done.json").exists());
    // Released, the same command trains that run alone.
    drop(lock);
    let first = long_docs("3");
    let err = String::from_utf8_lossy(&first.stderr).to_string();
    assert!(first.status.success(), "{err}");
    assert_eq!(err.matches("fine-tuning").count(), 1, "{err}");
    assert!(
        err.contains("fine-tuning absolute at 32 tokens, seed 1"),
        "{err}"
    );
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["settings"]["task"], "authorship");
    assert_eq!(results["labels"], serde_json::json!(["first", "second"]));
    assert_eq!(results["pending"], 0);
    assert_eq!(
        results["cells"].as_array().unwrap().len(),
        4,
        "rotary, absolute x 16, 32"
    );
    for run in results["runs"].as_array().unwrap() {
        let end = run["curve"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(end["step"], 3);
        let confusion = end["confusion"].as_array().unwrap();
        let total: u64 = confusion
            .iter()
            .flat_map(|row| row.as_array().unwrap())
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(total, 6, "2 labels x 3 dev examples");
        // Collapsed exactly when a label is never predicted or never recalled.
        let cell = |g: usize, p: usize| confusion[g][p].as_u64().unwrap();
        let used = (0..2).filter(|&p| cell(0, p) + cell(1, p) > 0).count();
        let collapsed = used < 2 || cell(0, 0) == 0 || cell(1, 1) == 0;
        assert_eq!(end["collapsed"], collapsed, "{end}");
    }
    assert_baselines(&results, "-gram cosine", &[16, 32]);
    // Chance: half of the 3 + 3 balanced dev examples, give or take 2 sqrt(0.25 / 6).
    assert_eq!(results["chance"]["accuracy"], 0.5);
    let noise = results["chance"]["noise"].as_f64().unwrap();
    assert!(
        (noise - 2.0 * (0.25f64 / 6.0).sqrt()).abs() < 1e-12,
        "{noise}"
    );
    let verdicts = results["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2);
    for v in verdicts {
        assert_eq!(
            (v["short"].as_u64(), v["long"].as_u64()),
            (Some(16), Some(32))
        );
        assert_eq!(v["seeds_ahead"][1], 2);
    }
    // Each dev line: the anchor as the text, the candidates as the pair, cut to an equal share
    // of 16 tokens: (16 - 4) / 3 = 4 characters each.
    let dev = std::fs::read_to_string(out.join("data/L16/dev.jsonl")).unwrap();
    let train = std::fs::read_to_string(out.join("data/L16/train.jsonl")).unwrap();
    assert_eq!(dev.lines().count(), 6);
    let mut labels = Vec::new();
    for line in dev.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let pair: Vec<&str> = v["text_pair"].as_str().unwrap().split("[SEP]").collect();
        assert_eq!(pair.len(), 2, "{v}");
        assert!(v["text"].as_str().unwrap().chars().count() <= 4);
        let poets = v["poets"].as_array().unwrap();
        let x = 1 + usize::from(v["label"] == "second");
        assert_eq!(poets[0], poets[x], "{v}");
        assert_ne!(poets[0], poets[3 - x], "{v}");
        labels.push(v["label"].as_str().unwrap().to_string());
    }
    assert_eq!(labels.iter().filter(|l| *l == "first").count(), 3);
    assert!(
        poets_of(&train).is_disjoint(&poets_of(&dev)),
        "no poet on both sides"
    );
    let section = std::fs::read_to_string(out.join("section.md")).unwrap();
    assert!(
        section.contains("### 3b.") && section.contains("collapsed"),
        "{section}"
    );
    assert!(section.contains("s mod n") && section.contains("**Verdict**"));
    assert!(
        section.contains("**Against the cheap baseline**") && section.contains("at 32 tokens"),
        "{section}"
    );
    assert!(
        section.contains("rotary 0, 0; absolute 0, 0"),
        "1 pre-trained seed: {section}"
    );
    for figure in [
        "long-docs.png",
        "long-docs-curves-L16.png",
        "long-docs-curves-L32.png",
    ] {
        assert!(std::fs::metadata(out.join(figure)).unwrap().len() > 1000);
    }

    // Given again, it trains nothing; with other settings, it refuses the finished runs.
    // The report of the finished runs is the one training wrote.
    let before = std::fs::read_to_string(out.join("section.md")).unwrap();
    assert!(long_docs_with("3", &["--report-only"]).status.success());
    assert_eq!(
        std::fs::read_to_string(out.join("section.md")).unwrap(),
        before
    );
    let again = long_docs("3");
    assert!(again.status.success());
    assert!(!String::from_utf8_lossy(&again.stderr).contains("fine-tuning"));
    let other = long_docs("4");
    assert!(!other.status.success());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        err.contains("finished with") && err.contains("--out"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_docs_refuses_an_arm_without_pre_trained_runs() {
    let dir = scratch("long-docs-arm");
    let runs = dir.join("conv/runs/rotary-s0");
    std::fs::create_dir_all(&runs).unwrap();
    let record = serde_json::json!({
        "arm": "rotary", "seed": 0, "dir": runs, "evals": [[6, 7.0, 0.1]], "seconds": 1.0
    });
    std::fs::write(runs.join("done.json"), record.to_string()).unwrap();
    let out = roformer(&[
        "experiment",
        "long-docs",
        "--from",
        dir.join("conv").to_str().unwrap(),
        "--out",
        dir.join("docs").to_str().unwrap(),
        "--arms",
        "rotary,t5",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--arms names t5") && err.contains("it has rotary"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn experiments_without_their_inputs_fail_clearly() {
    let dir = scratch("missing");
    let out = roformer(&[
        "experiment",
        "length",
        "--from",
        dir.join("nothing").to_str().unwrap(),
        "--out",
        dir.join("len").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("experiment convergence"), "{err}");
    let out = roformer(&[
        "experiment",
        "convergence",
        "--corpus",
        dir.join("no-corpus").to_str().unwrap(),
        "--out",
        dir.join("conv").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fetch_chinese_poetry"), "{err}");
    let settings = dir.join("settings.json");
    std::fs::write(&settings, r#"{ "stpes": 6 }"#).unwrap();
    let out = roformer(&[
        "experiment",
        "linear",
        "--settings",
        settings.to_str().unwrap(),
        "--out",
        dir.join("lin").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not this experiment's settings") && err.contains("stpes"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The loss values (one per seed) of the row named `name` (`arm` or `arm+scaling`) at cell
/// `i`.
fn row_losses(results: &Value, name: &str, i: usize) -> Vec<f64> {
    let row = results["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| match r["scaling"].as_str() {
            Some(s) => format!("{}+{s}", r["arm"].as_str().unwrap()) == name,
            None => r["arm"] == name,
        })
        .unwrap_or_else(|| panic!("no row {name}"));
    row["cells"][i]["loss"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// The sweep's final losses by (arm, rate), from `results.json`.
fn sweep_losses(results: &Value) -> Vec<(String, f64, f64)> {
    results["sweep"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["arm"].as_str().unwrap().to_string(),
                c["lr"].as_f64().unwrap(),
                c["final_loss"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn length_adds_rows_for_the_rotary_scalings() {
    let dir = scratch("scaled");
    let conv = dir.join("conv");
    let mut options = toy(&poetry(), &conv);
    options.extend(["--arms".to_string(), "rotary,absolute".to_string()]);
    run(&["experiment", "convergence"], &options);
    let len = dir.join("len");
    roformer_ok(&[
        "experiment",
        "length",
        "--from",
        conv.to_str().unwrap(),
        "--corpus",
        poetry().to_str().unwrap(),
        "--out",
        len.to_str().unwrap(),
        "--lengths",
        "16,32,64,128",
        "--tokens",
        "256",
    ]);
    let results = read_json(&len.join("results.json"));
    let names: Vec<String> = results["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r["scaling"].as_str() {
            Some(s) => format!("{}+{s}", r["arm"].as_str().unwrap()),
            None => r["arm"].as_str().unwrap().to_string(),
        })
        .collect();
    let scaled = [
        "rotary+pi",
        "rotary+ntk",
        "rotary+dynamic-ntk",
        "rotary+yarn",
    ];
    assert_eq!(names[0], "rotary");
    assert_eq!(names[1..5], scaled);
    assert_eq!(names[5], "absolute");
    for name in scaled {
        for i in 0..4 {
            let losses = row_losses(&results, name, i);
            assert_eq!(losses.len(), 2, "{name}: 2 seeds");
            assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
        }
        // At 16 and 32 tokens s = 1 (and dynamic NTK is below the training length): the
        // scaled model is the unscaled one, the same losses to the last bit.
        for i in 0..2 {
            assert_eq!(
                row_losses(&results, name, i),
                row_losses(&results, "rotary", i)
            );
        }
    }
    // The factor of each cell: length / 32 (at least 1), 1 for dynamic NTK (whose base follows
    // the length by itself). (The toy models barely use positions, so their losses cannot show
    // the scalings' effect: the library's tests do.)
    let factors = |row: usize| -> Vec<f64> {
        results["rows"][row]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["factor"].as_f64().unwrap())
            .collect()
    };
    assert_eq!(factors(1), [1.0, 1.0, 2.0, 4.0]);
    assert_eq!(factors(3), [1.0; 4]);
    assert!(results["rows"][0]["cells"][0]["factor"].is_null());
    let section = std::fs::read_to_string(len.join("section.md")).unwrap();
    assert!(section.contains("Loss by length, 2 seeds"), "{section}");
    assert!(section.contains("| rotary+yarn |") && section.contains("Lowest at 128"));
    assert!(section.contains("no ALiBi or no T5 arm"), "{section}");
    assert!(len.join("length.png").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_learning_rate_sweep_picks_each_arms_lowest_loss_and_runs_its_seeds_there() {
    let dir = scratch("sweep");
    let out = dir.join("sweep");
    let mut options = toy(&poetry(), &out);
    options.extend(
        [
            "--arms",
            "t5,absolute,alibi",
            "--sweep",
            "1e-3,3e-2",
            "--precision",
            "bf16",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    run(&["experiment", "convergence"], &options);
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["precision"], "bf16");
    assert_eq!(results["rates"], serde_json::json!([1e-3, 3e-2]));
    let cells = sweep_losses(&results);
    assert_eq!(cells.len(), 6, "3 arms x 2 rates, seed 0: {cells:?}");
    for arm in ["t5", "absolute", "alibi"] {
        let mine: Vec<&(String, f64, f64)> = cells.iter().filter(|c| c.0 == arm).collect();
        let lowest = mine.iter().min_by(|a, b| a.2.total_cmp(&b.2)).unwrap();
        let best = results["best"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["arm"] == arm)
            .unwrap();
        assert_eq!(best["lr"].as_f64().unwrap(), lowest.1, "{arm}: {best}");
        assert_eq!(best["final_loss"].as_f64().unwrap(), lowest.2);
        // Seed 1 ran at the best rate, and at no other.
        let seed1 = out.join(format!("runs/{arm}-lr{:e}-s1/done.json", lowest.1));
        assert!(seed1.is_file(), "{}", seed1.display());
        let other = mine.iter().find(|c| c.1 != lowest.1).unwrap().1;
        assert!(!out.join(format!("runs/{arm}-lr{other:e}-s1")).exists());
    }
    let best = &results["best_against_best"];
    assert_eq!(
        arms(best),
        [
            ("t5".into(), 2),
            ("absolute".into(), 2),
            ("alibi".into(), 2)
        ]
    );
    assert_eq!(best["reference"][0], "absolute");
    assert!(results["pending"].as_array().unwrap().is_empty());
    for figure in ["convergence.png", "convergence-sweep.png"] {
        assert!(std::fs::metadata(out.join(figure)).unwrap().len() > 1000);
    }
    let section = std::fs::read_to_string(out.join("section.md")).unwrap();
    assert!(
        section.contains("| t5 |") && section.contains("bf16"),
        "{section}"
    );
    assert!(section.contains("convergence-sweep.png"), "{section}");

    // Given again, it trains nothing.
    let again = run(&["experiment", "convergence"], &options);
    assert!(!String::from_utf8_lossy(&again.stderr).contains("pre-training"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sweep_of_one_rate_is_refused() {
    let dir = scratch("sweep1");
    let out = roformer(&[
        "experiment",
        "linear",
        "--out",
        dir.join("x").to_str().unwrap(),
        "--sweep",
        "1e-3",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sweep 0.001 is a single rate"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn linear_attention_takes_the_sweep_too() {
    let dir = scratch("sweep-linear");
    let out = dir.join("linear");
    let mut options = toy(&poetry(), &out);
    let seeds = options.iter().position(|o| o == "--seeds").unwrap();
    options[seeds + 1] = "1".into();
    options.extend(
        ["--arms", "rotary,absolute", "--sweep", "1e-3,3e-2"]
            .iter()
            .map(|s| s.to_string()),
    );
    run(&["experiment", "linear"], &options);
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["attention"], "linear");
    assert_eq!(results["precision"], "f32", "the default");
    assert_eq!(sweep_losses(&results).len(), 4, "2 arms x 2 rates");
    assert_eq!(results["best"].as_array().unwrap().len(), 2);
    assert_eq!(
        arms(&results["best_against_best"]),
        [("rotary".into(), 1), ("absolute".into(), 1)]
    );
    assert!(out.join("linear-sweep.png").is_file() && out.join("linear.png").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that a stop interrupted continues from its checkpoint when the same command is given
/// again, and ends as the same run uninterrupted does; its time counts both parts.
#[test]
fn an_interrupted_run_continues_from_its_checkpoint_and_ends_as_an_uninterrupted_one() {
    let dir = scratch("interrupted");
    let options = |out: &Path| {
        let mut o = toy(&poetry(), out);
        for (flag, value) in [
            ("--seeds", "1"),
            ("--steps", "3000"),
            ("--eval-every", "1000"),
        ] {
            let i = o.iter().position(|x| x == flag).unwrap();
            o[i + 1] = value.into();
        }
        o.extend(["--arms".to_string(), "absolute".to_string()]);
        o
    };
    let command = |out: &Path| {
        let mut args = vec!["experiment".to_string(), "convergence".to_string()];
        args.extend(options(out));
        args
    };
    let straight = dir.join("straight");
    run(&["experiment", "convergence"], &options(&straight));

    let split = dir.join("split");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_roformer"))
        .args(command(&split))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let run_dir = split.join("runs/absolute-s0");
    let metrics = run_dir.join("metrics.jsonl");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&metrics).map_or(true, |m| m.lines().count() < 3) {
        assert!(started.elapsed().as_secs() < 120, "no step logged");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let stopped = child.wait_with_output().unwrap();
    assert!(!stopped.status.success());
    let err = String::from_utf8_lossy(&stopped.stderr);
    assert!(
        err.contains("give the same command again") && !err.contains("--resume"),
        "{err}"
    );
    let state = read_json(&run_dir.join("checkpoint/trainer_state.json"));
    let at = state["step"].as_u64().unwrap();
    assert!((1..3000).contains(&at), "stopped at step {at}");
    let elapsed = read_json(&run_dir.join("elapsed.json"))["seconds"]
        .as_f64()
        .unwrap();
    assert!(elapsed > 0.0);

    let again = run(&["experiment", "convergence"], &options(&split));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("continuing the interrupted run"), "{err}");
    let done = |out: &Path| read_json(&out.join("runs/absolute-s0/done.json"));
    assert_eq!(
        done(&split)["evals"],
        done(&straight)["evals"],
        "the continued run's evaluations are the uninterrupted run's"
    );
    assert!(done(&split)["seconds"].as_f64().unwrap() > elapsed);
    let _ = std::fs::remove_dir_all(&dir);
}
