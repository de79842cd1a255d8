//! `train mlm --dump-steps N`: the first steps of a run written for the step-by-step
//! comparison with PyTorch (`scripts/compare_trajectory.py`).

use serde_json::Value;

use crate::common::{assert_each_fails, roformer, roformer_ok};
use crate::train::{step_losses, tiny_config, tiny_run};

#[test]
fn train_mlm_dumps_its_first_steps_resumes_without_the_dump_and_overwrites_it() {
    let mut t = tiny_run("dump");
    t.config = tiny_config(&t.dir, "absolute");
    let out = t.dir.join("run");
    let run = t
        .mlm(&out, "12")
        .with(&["--dump-steps", "4", "--stop-after", "4"]);
    roformer_ok(&run.strs());
    let dump = out.join("trajectory");

    // init/: a BERT checkpoint of the initial weights, with its tokenizer.
    let config: Value =
        serde_json::from_slice(&std::fs::read(dump.join("init/config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "bert");
    assert_eq!(config["architectures"][0], "BertForMaskedLM");
    for file in ["model.safetensors", "vocab.txt", "tokenizer_config.json"] {
        assert!(dump.join("init").join(file).is_file(), "{file}");
    }

    // batches.safetensors: four [steps, batch, seq] int64 tensors.
    let bytes = std::fs::read(dump.join("batches.safetensors")).unwrap();
    let batches = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = batches.names();
    names.sort();
    assert_eq!(
        names,
        ["attention_mask", "input_ids", "labels", "token_type_ids"]
    );
    for name in names {
        let tensor = batches.tensor(name).unwrap();
        assert_eq!(tensor.shape(), [4, 8, 64], "{name}");
        assert_eq!(tensor.dtype(), safetensors::Dtype::I64, "{name}");
    }

    // run.json: the settings and the losses the run logged (to 1e-12: a JSON round trip).
    let record: Value =
        serde_json::from_slice(&std::fs::read(dump.join("run.json")).unwrap()).unwrap();
    let logged = step_losses(&out);
    assert_eq!(logged.len(), 4, "stopped after the dumped steps");
    let dumped: Vec<f64> = record["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(dumped.len(), 4);
    for (d, l) in dumped.iter().zip(&logged) {
        assert!((d - l).abs() <= 1e-12 * l, "{dumped:?} {logged:?}");
    }
    assert_eq!(record["model"], "BertForMaskedLM");
    assert_eq!(record["total_steps"], 12, "the schedule is the run's");
    assert_eq!(record["warmup_steps"], 10);
    assert_eq!(record["lr"], 2e-3);
    assert_eq!(record["lrs"][0], 0.0);

    // The run resumes to its end; the dump is not part of what it recorded.
    roformer_ok(&[
        "train",
        "mlm",
        "--resume",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(step_losses(&out).len(), 12);
    let again: Value =
        serde_json::from_slice(&std::fs::read(dump.join("run.json")).unwrap()).unwrap();
    assert_eq!(again, record, "the resume leaves the dump as it was");

    // --overwrite replaces a run's directory with its dump.
    roformer_ok(&run.with(&["--overwrite"]).strs());
    assert_eq!(step_losses(&out).len(), 4);
    assert!(dump.join("run.json").is_file());
}

#[test]
fn train_mlm_refuses_a_dump_it_cannot_make() {
    let t = tiny_run("dump-refused");
    let out = t.dir.join("run");
    let run = t.mlm(&out, "4");
    assert_each_fails(
        &run.strs(),
        &[
            &["--dump-steps", "0"],
            &["--dump-steps", "2", "--grad-accum", "2"],
            &["--dump-steps", "2", "--resume"],
        ],
    );
    let zero = roformer(&run.with(&["--dump-steps", "0"]).strs());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--dump-steps must be at least 1"));
    assert!(!out.join("trajectory").exists());
}
