//! Our checkpoints in transformers: the directories under `tests/fixtures/roundtrip/` are what
//! our checkpoint writer makes of the training fixtures' models (checked here byte for byte),
//! and `scripts/check_hf_roundtrip.py` loaded each in transformers 5.23
//! (`RoFormerForMaskedLM`, `RoFormerForSequenceClassification`, `BertForMaskedLM`), found no
//! missing key (`--strict`: the keys transformers writes itself, its sinusoidal table included) and no unexpected one, and got our logits
//! within 1e-4 (its report, `report.json`, is checked here).
//!
//! Regenerate after a change of the writer: `ROFORMER_WRITE_FIXTURES=1 cargo test -p roformer
//! --test checkpoint_roundtrip`, then run the script (its header says how) on the three
//! directories from `tests/fixtures/roundtrip/` with `--strict --json report.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use roformer::train::build_trainable;
use roformer::train::checkpoint::{model_files, safetensors_bytes, write_dir_atomically};
use roformer::{
    Architecture, HeadModel, ModelDir, Precision, RoFormerForMaskedLM,
    RoFormerForSequenceClassification,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A BERT-style vocabulary of `size` lines: the special tokens, then CJK characters.
fn vocab(size: usize) -> String {
    let mut lines: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut c = 0x4e00u32;
    while lines.len() < size {
        lines.extend(char::from_u32(c).map(String::from));
        c += 1;
    }
    lines.join("\n") + "\n"
}

/// The files our writer makes of the training fixture `case` loaded as `M`, plus the inputs
/// and our inference logits on them.
fn our_files<M: HeadModel>(case: &str) -> (Vec<(String, Vec<u8>)>, Tensor) {
    let md = ModelDir::open(&fixtures().join("training").join(case)).unwrap();
    let t = build_trainable::<M>(&md.config, Some(&md.checkpoint), 0, &Device::Cpu).unwrap();
    let tokenizer_class = if md.config.base_prefix() == "bert" {
        "BertTokenizer"
    } else {
        "RoFormerTokenizer"
    };
    let mut files = model_files(&md.config, &t.model.architecture_name(), &t.params).unwrap();
    files.push(("vocab.txt".into(), vocab(md.config.vocab_size).into_bytes()));
    files.push((
        "tokenizer_config.json".into(),
        format!("{{\"tokenizer_class\": \"{tokenizer_class}\", \"do_lower_case\": true}}\n")
            .into_bytes(),
    ));
    let inputs: HashMap<String, Tensor> = candle_core::safetensors::load(
        fixtures()
            .join("training")
            .join(case)
            .join("inputs.safetensors"),
        &Device::Cpu,
    )
    .unwrap();
    let model_inputs: Vec<(String, Tensor)> = ["input_ids", "attention_mask", "token_type_ids"]
        .iter()
        .map(|k| (k.to_string(), inputs[*k].clone()))
        .collect();
    let out = t
        .model
        .forward(
            &inputs["input_ids"],
            Some(&inputs["token_type_ids"]),
            Some(&inputs["attention_mask"]),
            None,
        )
        .unwrap();
    files.push((
        "inputs.safetensors".into(),
        safetensors_bytes(&model_inputs).unwrap(),
    ));
    files.push((
        "ours.safetensors".into(),
        safetensors_bytes(&[("expected_logits".into(), out.logits.clone())]).unwrap(),
    ));
    (files, out.logits)
}

fn check_case<M: HeadModel + Architecture>(case: &str) {
    let (files, logits) = our_files::<M>(case);
    let dir = fixtures().join("roundtrip").join(case);
    if std::env::var_os("ROFORMER_WRITE_FIXTURES").is_some() {
        write_dir_atomically(&dir, &files).unwrap();
    }
    for (name, bytes) in &files {
        let committed = std::fs::read(dir.join(name)).unwrap();
        if name == "ours.safetensors" {
            // Summation order may differ between machines and between the fused inference
            // encoder and the op-by-op one (logits of size ~10 move by a few 1e-5): compare
            // values, not bytes, within the fused path's tolerance.
            let theirs = candle_core::safetensors::load(dir.join(name), &Device::Cpu).unwrap();
            let diff = (&logits - &theirs["expected_logits"])
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(diff <= 1e-4, "{case}: logits moved by {diff}");
        } else {
            assert!(
                committed == *bytes,
                "{case}/{name} is not what the writer writes now"
            );
        }
    }
    // The committed model loads back here too, through the inference loader.
    let back = ModelDir::open(&dir)
        .unwrap()
        .load::<M>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let inputs =
        candle_core::safetensors::load(dir.join("inputs.safetensors"), &Device::Cpu).unwrap();
    let again = back
        .forward(
            &inputs["input_ids"],
            Some(&inputs["token_type_ids"]),
            Some(&inputs["attention_mask"]),
            None,
        )
        .unwrap();
    let diff = (&again.logits - &logits)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert_eq!(diff, 0.0, "{case}: reloaded model differs");
}

#[test]
fn roformer_mlm_checkpoint_is_what_we_write() {
    check_case::<RoFormerForMaskedLM>("mlm_rotary");
}

#[test]
fn roformer_classifier_checkpoint_is_what_we_write() {
    check_case::<RoFormerForSequenceClassification>("seq_cls");
}

#[test]
fn bert_mlm_checkpoint_is_what_we_write() {
    check_case::<RoFormerForMaskedLM>("bert_mlm");
}

#[test]
fn transformers_loads_our_checkpoints_with_our_logits() {
    let text = std::fs::read_to_string(fixtures().join("roundtrip/report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["ok"], true, "{text}");
    assert_eq!(report["strict"], true, "{text}");
    let dirs = report["dirs"].as_array().unwrap();
    let mut architectures: Vec<&str> = dirs
        .iter()
        .map(|d| d["architecture"].as_str().unwrap())
        .collect();
    architectures.sort_unstable();
    assert_eq!(
        architectures,
        [
            "BertForMaskedLM",
            "RoFormerForMaskedLM",
            "RoFormerForSequenceClassification"
        ]
    );
    for d in dirs {
        assert_eq!(d["ok"], true, "{d}");
        assert!(d["unexpected"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["missing"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["max_abs_diff"].as_f64().unwrap() <= 1e-4, "{d}");
    }
}
