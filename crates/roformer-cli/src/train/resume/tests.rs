//! `--resume`'s merge and `run.json`'s versions on `train mlm`'s flags.

use clap::CommandFactory;
use roformer::train::classify::ClassifyOptions;
use roformer::train::mlm::MlmDataOptions;
use roformer::Precision;
use test_support::Scratch;

use super::*;

/// The flags of `train mlm --out run`, parsed.
fn mlm(flags: &[&str]) -> crate::train::mlm::Args {
    let mut args = vec!["mlm", "--out", "run"];
    args.extend_from_slice(flags);
    let cli = <crate::train::mlm::Args as clap::Args>::augment_args(clap::Command::new("mlm"));
    let matches = cli.try_get_matches_from(args).unwrap();
    <crate::train::mlm::Args as clap::FromArgMatches>::from_arg_matches(&matches).unwrap()
}

/// The run that `train mlm` with `flags` records.
fn recorded(flags: &[&str]) -> Settings<crate::train::mlm::Model, MlmDataOptions> {
    let args = mlm(flags);
    args.settings_over(&args.defaults())
}

/// [`merge`] with `train mlm`'s value names.
fn merge_mlm(
    run: &Settings<crate::train::mlm::Model, MlmDataOptions>,
    asked: &Settings<crate::train::mlm::Model, MlmDataOptions>,
    out: &Path,
) -> anyhow::Result<Settings<crate::train::mlm::Model, MlmDataOptions>> {
    merge(
        run,
        asked,
        out,
        <crate::train::mlm::Args as Flags>::flag_value,
    )
}

fn started() -> Settings<crate::train::mlm::Model, MlmDataOptions> {
    recorded(&[
        "--corpus", "poems", "--vocab", "v", "--config", "c", "--steps", "8", "--lr", "2e-3",
    ])
}

#[test]
fn a_resume_takes_a_flag_it_may_change_and_keeps_the_rest() {
    let run = started();
    let args = mlm(&[
        "--resume",
        "--steps",
        "16",
        "--save-every",
        "2",
        "--precision",
        "bf16",
    ]);
    let merged = merge_mlm(&run, &args.settings_over(&run), Path::new("copy")).unwrap();
    assert_eq!(merged.train.steps, Some(16));
    assert_eq!(merged.train.save_every, 2);
    assert_eq!(merged.train.precision, Precision::Bf16);
    assert_eq!(merged.train.eval_every, 0, "not given: the run's");
    assert_eq!(
        merged.train.lr, 2e-3,
        "not given: the run's, not the default"
    );
    assert_eq!(merged.out, Path::new("copy"));
    assert_eq!((merged.model, merged.data), (run.model, run.data));
}

#[test]
fn a_resume_refuses_another_flag_naming_it_but_takes_the_runs_value_again() {
    let run = started();
    let same = mlm(&["--resume", "--lr", "0.002", "--corpus", "poems"]);
    assert!(merge_mlm(&run, &same.settings_over(&run), Path::new("run")).is_ok());
    let err = merge_mlm(
        &run,
        &mlm(&["--resume", "--lr", "0.01"]).settings_over(&run),
        Path::new("run"),
    );
    assert_eq!(
        err.unwrap_err().to_string(),
        "--lr 0.01 cannot change on --resume: the run has --lr 0.002; drop the flag (a \
         resume may change --steps, --precision, --save-every, --eval-every)"
    );
    for (flags, want) in [
        (
            &["--corpus", "other", "more"][..],
            "--corpus other,more cannot change",
        ),
        (
            &["--seq-len", "32"],
            "--seq-len 32 cannot change on --resume: the run has --seq-len 128",
        ),
        (
            &["--line-by-line"],
            "--line-by-line true cannot change on --resume: the run has --line-by-line false",
        ),
        (&["--batch", "4"], "--batch 4 cannot change"),
        (
            &["--position", "alibi"],
            "--position alibi cannot change on --resume: the run has --position (none)",
        ),
        (
            &["--format", "jsonl"],
            "--format jsonl --text-field text cannot change on --resume: the run has --format \
             auto",
        ),
        (
            &["--decay", "cosine"],
            "--decay cosine cannot change on --resume: the run has --decay linear",
        ),
        (&["--plot", "loss.svg"], "--plot loss.svg cannot change"),
    ] {
        let asked = mlm(&[&["--resume"], flags].concat()).settings_over(&run);
        let err = merge_mlm(&run, &asked, Path::new("run")).unwrap_err();
        assert!(err.to_string().starts_with(want), "{flags:?}: {err}");
    }
}

#[test]
fn a_refused_enum_flag_is_named_by_its_value_names_on_both_sides() {
    // The message gives each value as the flag takes it, never serde's or Rust's name.
    let run = recorded(&[
        "--corpus",
        "poems",
        "--config",
        "c",
        "--vocab",
        "v",
        "--position",
        "t5",
        "--format",
        "jsonl",
        "--text-field",
        "body",
        "--decay",
        "constant",
        "--steps",
        "8",
    ]);
    for (flags, want) in [
        (
            &["--position", "alibi"][..],
            "--position alibi cannot change on --resume: the run has --position t5;",
        ),
        (
            &["--format", "poetry"],
            "--format poetry cannot change on --resume: the run has --format jsonl --text-field \
             body;",
        ),
        (
            &["--text-field", "text"],
            "--format jsonl --text-field text cannot change on --resume: the run has --format \
             jsonl --text-field body;",
        ),
        (
            &["--decay", "cosine"],
            "--decay cosine cannot change on --resume: the run has --decay constant;",
        ),
    ] {
        let asked = mlm(&[&["--resume"], flags].concat()).settings_over(&run);
        let err = merge_mlm(&run, &asked, Path::new("run")).unwrap_err();
        assert!(err.to_string().starts_with(want), "{flags:?}: {err}");
    }
    // The library's own enums serialise as their flags' values: `bf16`, not `Bf16`.
    let named = <crate::train::mlm::Args as Flags>::flag_value;
    let bf16 = serde_json::to_value(TrainOptions {
        precision: Precision::Bf16,
        ..TrainOptions::default()
    })
    .unwrap();
    assert_eq!(value_text("precision", &bf16["precision"], named), "bf16");
}

#[test]
fn every_recorded_field_names_a_flag_of_its_command() {
    let commands = crate::Cli::command();
    let train = commands.find_subcommand("train").unwrap();
    let longs = |sub: &str| -> Vec<String> {
        let command = train.find_subcommand(sub).unwrap();
        command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect()
    };
    let fields = |value: serde_json::Value| -> Vec<String> {
        value.as_object().unwrap().keys().cloned().collect()
    };
    let train_fields = fields(serde_json::to_value(TrainOptions::default()).unwrap());
    let mlm_fields = [
        fields(serde_json::to_value(MlmDataOptions::default()).unwrap()),
        fields(serde_json::to_value(started().model).unwrap()),
    ]
    .concat();
    let classify_fields = [
        fields(serde_json::to_value(ClassifyOptions::default()).unwrap()),
        vec!["init".to_string()],
    ]
    .concat();
    for (sub, own) in [("mlm", mlm_fields), ("classify", classify_fields)] {
        let flags = longs(sub);
        for field in train_fields
            .iter()
            .chain(&own)
            .chain(["plot".to_string()].iter())
        {
            assert!(
                flags.contains(&flag_of(field)),
                "{sub}: {field} -> {}",
                flag_of(field)
            );
        }
    }
}

#[test]
fn a_flat_run_json_of_before_reads_as_the_flags_it_holds() {
    // The run.json that `train mlm --config c --vocab v --corpus poems --steps 8 --lr 2e-3
    // --out run` wrote before the settings were typed.
    let dir = Scratch::new("roformer-resume", "old-record");
    let old = r#"{"config": "c", "vocab": "v", "init": null, "position": null,
        "corpus": ["poems"], "format": "Auto", "text_field": "text", "seq_len": 128,
        "line_by_line": false, "whole_word": false, "also_simplified": false,
        "also_lines": 0.0, "alone_share": 0.0, "validation": 0.05, "batch": 16,
        "steps": 8, "lr": 0.002, "seed": 0, "eval_batches": 50, "grad_accum": 1,
        "warmup": 0, "decay": "Linear", "weight_decay": 0.01, "max_grad_norm": 1.0,
        "eval_every": 0, "save_every": 0, "out": "run", "overwrite": false,
        "resume": false, "plot": "loss.png", "stop_after": null, "precision": null,
        "json": true, "quiet": false}"#;
    std::fs::write(dir.join("run.json"), old).unwrap();
    let (settings, fingerprint) = read_settings(&mlm(&["--resume"]), &dir).unwrap();
    assert!(fingerprint.is_none());
    let mut want = started();
    want.out = PathBuf::from("run");
    let mut got = settings;
    got.out = PathBuf::from("run");
    assert_eq!(got, want);

    // A record of another version, and a malformed one: clear errors.
    std::fs::write(dir.join("run.json"), r#"{"version": 3}"#).unwrap();
    let err = read_settings(&mlm(&["--resume"]), &dir).unwrap_err();
    assert!(
        err.to_string()
            .contains("is of version 3; this roformer reads version 2"),
        "{err:#}"
    );
    std::fs::write(dir.join("run.json"), r#"{"steps": "many"}"#).unwrap();
    let err = read_settings(&mlm(&["--resume"]), &dir).unwrap_err();
    assert!(
        err.to_string()
            .contains("of an earlier version) is malformed"),
        "{err:#}"
    );
}
