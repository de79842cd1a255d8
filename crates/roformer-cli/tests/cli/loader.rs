//! `roformer forward` on hostile checkpoints (issue 11): a pickle nested 200 000 levels deep
//! aborted the process (exit 134, stack overflow) and a NaN weight gave NaN outputs with exit
//! status 0. Both are now an error that names the problem. A checkpoint truncated during the
//! load killed the process with SIGBUS (issue 19); it is now "changed while it was being
//! read".

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use candle_core::{Device, Tensor};

use crate::common::{roformer, run_while_truncating};
use crate::fill_mask::scratch;

fn mlm_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roformer/tests/fixtures/model/mlm_gelu")
}

/// `roformer forward` on a directory holding the fixture's config and `file` = `bytes`.
fn forward_with(name: &str, file: &str, bytes: &[u8]) -> Output {
    let dir = scratch(&format!("loader-{name}"));
    std::fs::copy(mlm_fixture().join("config.json"), dir.join("config.json")).unwrap();
    std::fs::write(dir.join(file), bytes).unwrap();
    let input = dir.join("input.json");
    std::fs::write(&input, r#"{"input_ids": [[2, 50, 96, 3]]}"#).unwrap();
    let out = dir.join("out.safetensors");
    roformer(&[
        "forward",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ])
}

fn assert_fails_saying(out: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

#[test]
fn a_deeply_nested_pickle_is_an_error_not_an_abort() {
    let mut pickle = b"\x80\x02".to_vec();
    pickle.extend(std::iter::repeat_n(b']', 200_000));
    pickle.extend(std::iter::repeat_n(b'a', 199_999));
    pickle.push(b'.');
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", stored).unwrap();
    zip.write_all(&pickle).unwrap();
    let bin = zip.finish().unwrap().into_inner();
    let out = forward_with("nested", "pytorch_model.bin", &bin);
    assert_fails_saying(&out, "nested deeper than 1000 levels");
}

#[test]
fn a_nan_weight_is_refused_by_name() {
    let query = "roformer.encoder.layer.0.attention.self.query.weight";
    let mut tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(mlm_fixture().join("model.safetensors"), &Device::Cpu)
            .unwrap();
    let mut values = tensors[query]
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    values[7] = f32::NAN;
    tensors.insert(
        query.into(),
        Tensor::from_vec(values, (32, 32), &Device::Cpu).unwrap(),
    );
    let dir = scratch("loader-nan-src");
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let out = forward_with("nan", "model.safetensors", &std::fs::read(path).unwrap());
    assert_fails_saying(&out, &format!("tensor {query} holds NaN at flat index 7"));
}

/// The fixture's model with a 500 000-token vocabulary: a 64 MB f32 embedding, so that the load
/// takes long enough to be cut short. Writes `config.json`, `model.safetensors` and
/// `input.json` into `dir`.
fn big_model(dir: &Path) {
    let vocab = 500_000;
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(mlm_fixture().join("config.json")).unwrap()).unwrap();
    config["vocab_size"] = vocab.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(mlm_fixture().join("model.safetensors"), &Device::Cpu)
            .unwrap();
    let word = Tensor::full(0.01f32, (vocab, 32), &Device::Cpu).unwrap();
    tensors.insert("roformer.embeddings.word_embeddings.weight".into(), word);
    let bias = Tensor::zeros(vocab, candle_core::DType::F32, &Device::Cpu).unwrap();
    tensors.insert("cls.predictions.bias".into(), bias);
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("input.json"), r#"{"input_ids": [[2, 50, 96, 3]]}"#).unwrap();
}

#[test]
fn a_checkpoint_truncated_during_the_load_is_a_clean_error_never_a_signal() {
    let dir = scratch("loader-truncate");
    let st = dir.join("model.safetensors");
    let (input, out) = (dir.join("input.json"), dir.join("out.safetensors"));
    let args = [
        "forward",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    let mut changed = 0;
    for delay_ms in [0, 5, 10, 20, 40, 80] {
        big_model(&dir);
        let (success, stderr) = run_while_truncating(&args, &st, delay_ms);
        if !success {
            // Truncated before the header was read, the file is simply a malformed one.
            let clean = stderr.contains("changed while it was being read")
                || stderr.contains("unreadable checkpoint");
            assert!(
                clean && stderr.contains("model.safetensors"),
                "{delay_ms} ms: {stderr}"
            );
            changed += stderr.contains("changed while it was being read") as usize;
        }
    }
    eprintln!("{changed} of 6 loads were cut short during the tensor reads");
}
