//! Issue 19, items 8-10 and its messages: what `--resume` checks (the step, the flags that
//! may change, the run's fingerprint), numeric flags, labels, vocabularies and duplicate
//! experiment arms refused with a message that names the flag or file and both values.

use std::path::{Path, PathBuf};

use crate::common::{roformer, roformer_ok};
use crate::train::{
    checkpoint_step, classify_examples, copy_dir, poetry, scratch, sized_config, tiny_run, TinyRun,
};

/// Runs `args`, asserting exit `code` with a message that contains every one of `want`.
fn fails_with(args: &[&str], code: i32, want: &[&str]) -> String {
    let out = roformer(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: missing {w:?} in {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A run of `steps` steps (batch 4, no warm-up) in `t.dir/name` on `corpus`, stopped after
/// `stop` (saved there).
fn started_run(t: &TinyRun, name: &str, corpus: &Path, steps: &str, stop: &str) -> PathBuf {
    let out = t.dir.join(name);
    let args = t.mlm(&out, steps).set("--corpus", corpus.to_str().unwrap());
    let args = args.set("--batch", "4").set("--warmup", "0");
    roformer_ok(&args.set("--stop-after", stop).strs());
    out
}

/// `train mlm --resume --out OUT` with `extra`.
fn resume<'a>(out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "mlm",
        "--resume",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    args
}

/// A copy of run `out` as `out-NAME`, to damage.
fn copy_of(out: &Path, name: &str) -> PathBuf {
    let copy = out.with_file_name(format!(
        "{}-{name}",
        out.file_name().unwrap().to_str().unwrap()
    ));
    copy_dir(out, &copy);
    copy
}

#[test]
fn resume_takes_only_the_flags_a_resume_may_change() {
    let t = tiny_run("checks-flags");
    let out = started_run(&t, "run", &poetry(), "6", "2");
    fails_with(
        &resume(&out, &["--lr", "0.01"]),
        1,
        &[
            "--lr 0.01 cannot change on --resume",
            "the run has --lr 0.002",
            "--steps",
        ],
    );
    fails_with(
        &resume(&out, &["--seq-len", "32"]),
        1,
        &["--seq-len 32", "--seq-len 64"],
    );
    fails_with(&resume(&out, &["--overwrite"]), 2, &["--overwrite"]);
    // Repeating the run's value is fine; --steps and --save-every may change.
    roformer_ok(&resume(
        &out,
        &["--lr", "2e-3", "--steps", "4", "--save-every", "1"],
    ));
    assert_eq!(checkpoint_step(&out), 4);
    // --steps below the steps done.
    fails_with(
        &resume(&out, &["--steps", "3"]),
        1,
        &[
            "trainer_state.json: step 4 is beyond the run's 3 steps",
            "--steps 4",
        ],
    );
}

#[test]
fn resume_refuses_a_step_the_run_cannot_continue_from() {
    let t = tiny_run("checks-step");
    let out = started_run(&t, "run", &poetry(), "6", "2");
    for (name, step, want) in [
        ("max", "18446744073709551615", "records step 2"),
        (
            "zero",
            "0",
            "step 0, but a checkpoint is only written after a step",
        ),
    ] {
        let copy = copy_of(&out, name);
        let state = copy.join("checkpoint/trainer_state.json");
        let text = std::fs::read_to_string(&state).unwrap().replacen(
            "\"step\": 2",
            &format!("\"step\": {step}"),
            1,
        );
        std::fs::write(&state, text).unwrap();
        fails_with(&resume(&copy, &[]), 1, &["trainer_state.json", want]);
    }
}

#[test]
fn resume_refuses_another_vocabulary_corpus_or_shape_and_accepts_an_old_record() {
    let t = tiny_run("checks-fingerprint");
    let dir = &t.dir;
    let corpus = dir.join("corpus.txt");
    let songci = std::fs::read_to_string(poetry().join("songci/ci.song.0.json")).unwrap();
    let lines: String = songci
        .split('"')
        .filter(|s| s.chars().count() > 6 && !s.contains(':'))
        .map(|s| format!("{s}\n"))
        .collect();
    std::fs::write(&corpus, &lines).unwrap();
    let out = started_run(&t, "run", &corpus, "6", "2");

    // One token of the checkpoint's vocabulary edited (the size stays).
    let copy = copy_of(&out, "vocab");
    let vocab = copy.join("checkpoint/vocab.txt");
    let mut tokens: Vec<String> = std::fs::read_to_string(&vocab)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    tokens[100] = "X".into();
    std::fs::write(&vocab, tokens.join("\n") + "\n").unwrap();
    fails_with(&resume(&copy, &[]), 1, &["vocabulary", "hash"]);

    // The corpus changed.
    let copy = copy_of(&out, "corpus");
    std::fs::write(&corpus, format!("{lines}床前明月光，疑是地上霜。\n")).unwrap();
    fails_with(&resume(&copy, &[]), 1, &["--corpus", "documents", "now"]);
    std::fs::write(&corpus, &lines).unwrap();

    // The checkpoint of another run, of another width.
    let other = dir.join("other");
    let wide = sized_config(dir, "rotary", 32);
    let args = t.mlm(&other, "2").set("--config", wide.to_str().unwrap());
    let args = args.set("--corpus", corpus.to_str().unwrap());
    roformer_ok(&args.set("--batch", "4").set("--warmup", "0").strs());
    let copy = copy_of(&out, "shape");
    std::fs::remove_dir_all(copy.join("checkpoint")).unwrap();
    copy_dir(&other.join("checkpoint"), &copy.join("checkpoint"));
    fails_with(
        &resume(&copy, &[]),
        1,
        &["config field hidden_size", "parameter shapes"],
    );

    // A run.json from before fingerprints: resumed with a warning, and recorded from then on.
    let copy = copy_of(&out, "old");
    let record = copy.join("run.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    value.as_object_mut().unwrap().remove("fingerprint");
    std::fs::write(&record, value.to_string()).unwrap();
    let run = roformer_ok(&resume(&copy, &[]));
    assert!(String::from_utf8_lossy(&run.stderr).contains("records no fingerprint"));
    assert!(std::fs::read_to_string(&record)
        .unwrap()
        .contains("fingerprint"));
    assert_eq!(checkpoint_step(&copy), 6);
}

#[test]
fn numeric_flags_are_checked_at_the_flag() {
    let dir = scratch("checks-numbers");
    let examples = classify_examples(&dir);
    let e = examples.to_str().unwrap();
    for (flag, value) in [
        ("--max-grad-norm", "-1"),
        ("--max-grad-norm", "NaN"),
        ("--lr", "nan"),
        ("--weight-decay", "-0.1"),
    ] {
        for command in [
            &["train", "mlm", "--corpus", e, "--steps", "1", "--init", "x"][..],
            &["train", "classify", "--init", "x", "--train", e][..],
        ] {
            let mut args = command.to_vec();
            args.extend_from_slice(&["--out", "unused", flag, value]);
            fails_with(&args, 2, &[flag, value, "finite number"]);
        }
    }
}

#[test]
fn labels_vocabularies_and_arms_are_checked() {
    let t = tiny_run("checks-labels");
    let dir = &t.dir;
    let init = started_run(&t, "mlm", &poetry(), "1", "1").join("checkpoint");
    let i = init.to_str().unwrap();
    let write = |name: &str, labels: &[&str]| {
        let path = dir.join(name);
        let text: String = labels
            .iter()
            .map(|l| format!("{{\"text\": \"床前明月光\", \"label\": {l}}}\n"))
            .collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    let names = write("names.jsonl", &["\"pos\"", "\"neg\""]);
    let mixed = write("mixed.jsonl", &["\"pos\"", "\"neg\"", "1"]);
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let classify = |train: &Path, extra: &[&str]| -> Vec<String> {
        [
            "train",
            "classify",
            "--init",
            i,
            "--train",
            train.to_str().unwrap(),
            "--out",
            o,
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    };
    let run = |args: Vec<String>, want: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, 1, want);
    };
    run(
        classify(&names, &["--labels", "pos,pos,neg"]),
        &["--labels pos,pos,neg", "\"pos\" is given twice"],
    );
    run(
        classify(&mixed, &[]),
        &["mixed.jsonl:3", "is a number", "line 1 is a name"],
    );
    run(
        classify(&mixed, &["--labels", "pos,neg"]),
        &["mixed.jsonl:3", "the labels are names"],
    );
    // A vocabulary longer than the config's vocab_size.
    let long = dir.join("long-vocab");
    copy_dir(&init, &long);
    let mut text = std::fs::read_to_string(long.join("vocab.txt")).unwrap();
    let size = text.lines().count();
    text.push_str("多余\n");
    std::fs::write(long.join("vocab.txt"), text).unwrap();
    let args = [
        "train",
        "classify",
        "--init",
        long.to_str().unwrap(),
        "--train",
        names.to_str().unwrap(),
        "--out",
        o,
    ];
    fails_with(
        &args,
        1,
        &[
            &format!("has {} tokens", size + 1),
            &format!("vocab_size {size}"),
        ],
    );
    // An experiment arm named twice.
    fails_with(
        &[
            "experiment",
            "convergence",
            "--arms",
            "absolute,absolute",
            "--out",
            o,
        ],
        1,
        &["--arms names absolute twice"],
    );
}

#[test]
fn a_resumed_run_that_fails_before_saving_names_the_checkpoint_it_had() {
    let t = tiny_run("checks-diverge");
    let out = t.dir.join("run");
    // Step 1 is finite (its loss comes before the update); the steps after diverge.
    let args = t.mlm(&out, "50").set("--lr", "1e30").set("--warmup", "0");
    roformer_ok(&args.set("--stop-after", "1").strs());
    let err = fails_with(&resume(&out, &[]), 1, &["non-finite"]);
    assert!(
        err.contains("the last good checkpoint is") && err.contains("step 1, from before"),
        "{err}"
    );
    assert!(!err.contains("no checkpoint was written"), "{err}");
}

#[test]
fn a_corpus_too_short_for_one_block_is_named() {
    let t = tiny_run("checks-block");
    let corpus = t.dir.join("one.txt");
    std::fs::write(&corpus, "床前明月光\n").unwrap();
    let args = t.mlm(&t.dir.join("out"), "1");
    fails_with(
        &args.set("--corpus", corpus.to_str().unwrap()).strs(),
        1,
        &[
            "--seq-len 64",
            "no training block of 64 tokens",
            "1 documents",
        ],
    );
}
