//! `roformer forward` on hostile checkpoints (issue 11): a pickle nested 200 000 levels deep
//! aborted the process (exit 134, stack overflow) and a NaN weight gave NaN outputs with exit
//! status 0. Both are now an error that names the problem.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use candle_core::{Device, Tensor};

use crate::common::roformer;
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
    let path = scratch("loader-nan-src").join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let out = forward_with("nan", "model.safetensors", &std::fs::read(path).unwrap());
    assert_fails_saying(&out, &format!("tensor {query} holds NaN at flat index 7"));
}
