//! What the loader and the model refuse (issue 19, items 7, 11, 13, 14): NaN and infinite
//! weights and block scales, activations and logits out of range, out-of-range special token
//! ids, overlapping tensor data, a block count that disagrees with the tensors, a FIFO, and a
//! file truncated while it is read.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use candle_core::quantized::GgmlDType;
use common::{
    tiny_gguf, tiny_metadata, tiny_weights, v_str, v_strings, v_u32, Gguf, Tiny, TinyWeights, TINY,
};
use llama::generate::{generate, Sampling};
use llama::gguf::GgufFile;
use llama::{Llama, LlamaError, LoadOptions, Tokenizer};
use test_support::Scratch;

fn options(dequantize: bool) -> LoadOptions {
    LoadOptions {
        dequantize,
        ..LoadOptions::default()
    }
}

fn load(bytes: Vec<u8>, dequantize: bool) -> Result<Llama, LlamaError> {
    Llama::load(
        &GgufFile::from_bytes("t.gguf", bytes)?,
        &options(dequantize),
    )
}

/// `weights` with `name`'s element `index` set to `value`.
fn with_value(mut weights: TinyWeights, name: &str, index: usize, value: f32) -> TinyWeights {
    let entry = weights.tensors.iter_mut().find(|(n, _, _)| n == name);
    entry.unwrap().2[index] = value;
    weights
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("llama-checks", name)
}

#[test]
fn nan_in_a_float_weight_is_refused_at_load_on_every_path() {
    for name in ["blk.0.attn_norm.weight", "output_norm.weight"] {
        let w = with_value(tiny_weights(1), name, 5, f32::NAN);
        for kind in [GgmlDType::F32, GgmlDType::Q8_0, GgmlDType::Q4_1] {
            for dequantize in [false, true] {
                match load(tiny_gguf(&w, kind), dequantize) {
                    Err(e @ LlamaError::NonFiniteWeight { .. }) => {
                        let msg = e.to_string();
                        assert!(msg.contains(name) && msg.contains("index 5"), "{msg}");
                        assert!(msg.contains("NaN"), "{msg}");
                    }
                    other => panic!("{name} {kind:?} {dequantize}: {other:?}"),
                }
            }
        }
    }
    // An infinity in a 2-D f32 weight, too.
    let w = with_value(tiny_weights(1), "blk.1.ffn_up.weight", 70, f32::INFINITY);
    let err = load(tiny_gguf(&w, GgmlDType::F32), false).unwrap_err();
    assert!(
        err.to_string()
            .contains("`blk.1.ffn_up.weight` holds inf at index 70"),
        "{err}"
    );
}

#[test]
fn a_nan_block_scale_is_refused_with_its_block() {
    for (kind, size) in [
        (GgmlDType::Q8_0, 34),
        (GgmlDType::Q4_1, 20),
        (GgmlDType::Q4_0, 18),
    ] {
        let mut bytes = tiny_gguf(&tiny_weights(2), kind);
        let file = GgufFile::from_bytes("t.gguf", bytes.clone()).unwrap();
        let start = file.tensor_info("blk.0.attn_q.weight").unwrap().start;
        // Block 3's f16 scale `d` (its first two bytes) becomes a NaN.
        bytes[start + 3 * size..start + 3 * size + 2].copy_from_slice(&[0x00, 0x7e]);
        for dequantize in [false, true] {
            let err = load(bytes.clone(), dequantize).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, LlamaError::NonFiniteWeight { .. }), "{msg}");
            assert!(
                msg.contains("`blk.0.attn_q.weight`")
                    && msg.contains("scale `d` of block 3 (values 96..128)"),
                "{kind:?}: {msg}"
            );
        }
    }
}

#[test]
fn huge_weights_fail_at_run_time_on_every_path() {
    let mut w = tiny_weights(3);
    let norm = w
        .tensors
        .iter_mut()
        .find(|(n, _, _)| n == "blk.0.ffn_norm.weight")
        .unwrap();
    norm.2.iter_mut().for_each(|v| *v = 1e30);
    for kind in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
        let model = load(tiny_gguf(&w, kind), false).unwrap();
        // Greedy, sampled at temperature 1, and all logits: each a clear error.
        for sampling in [
            Sampling::GREEDY,
            Sampling {
                temperature: 1.0,
                seed: 7,
            },
        ] {
            let err = generate(&model, &[1, 2, 3], 4, sampling, None, |_| Ok(())).unwrap_err();
            match &err {
                LlamaError::Activation { weight, limit, .. } => {
                    assert_eq!(weight, "blk.0.ffn_gate.weight", "{kind:?}");
                    assert_eq!(*limit, 65504.0 * 127.0);
                }
                other => panic!("{kind:?}: {other}"),
            }
        }
    }
    // Dequantized, the f32 products overflow and the logits say so.
    let model = load(tiny_gguf(&w, GgmlDType::Q8_0), true).unwrap();
    let ids = candle_core::Tensor::new(&[[1u32, 2, 3]], &candle_core::Device::Cpu).unwrap();
    let mut cache = model.cache(1, 3);
    let err = model
        .forward(&ids, &mut cache, llama::Logits::All)
        .unwrap_err();
    assert!(
        matches!(
            err,
            LlamaError::NonFiniteLogit {
                sequence: 0,
                position: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn out_of_range_special_token_ids_are_refused() {
    let tokenizer = |key: &str, id: u32| {
        let mut g = Gguf::default();
        g.meta("tokenizer.ggml.model", v_str("gpt2"))
            .meta("tokenizer.ggml.tokens", v_strings(&["a", "b", "ab"]))
            .meta("tokenizer.ggml.merges", v_strings(&["a b"]))
            .meta(key, v_u32(id));
        Tokenizer::from_gguf(&GgufFile::from_bytes("t.gguf", g.bytes()).unwrap())
    };
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id",
    ] {
        let ok = tokenizer(key, 2).unwrap();
        let read = [ok.bos(), ok.eos(), ok.pad(), ok.unk()];
        assert_eq!(read.iter().flatten().count(), 1, "{key}");
        let err = tokenizer(key, 3).unwrap_err().to_string();
        assert!(
            err.contains(key) && err.contains("U32(3)") && err.contains("below 3"),
            "{err}"
        );
    }
}

/// The offset field of tensor `name` in the directory of `bytes` (written by [`Gguf`]).
fn offset_field(bytes: &[u8], name: &str, dims: usize) -> usize {
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend(name.as_bytes());
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    at + key.len() + 4 + 8 * dims + 4
}

#[test]
fn overlapping_tensor_data_is_refused() {
    let mut g = Gguf::default();
    g.f32_tensor("a", &[16], &[1.0; 16]);
    g.f32_tensor("b", &[16], &[2.0; 16]);
    let clean = g.bytes();
    assert!(GgufFile::from_bytes("t.gguf", clean.clone()).is_ok());
    // `b` at data offset 32: bytes 32..96 of the data, overlapping `a` (0..64).
    let mut bytes = clean;
    let field = offset_field(&bytes, "b", 1);
    bytes[field..field + 8].copy_from_slice(&32u64.to_le_bytes());
    let err = GgufFile::from_bytes("t.gguf", bytes).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LlamaError::Malformed { .. }), "{msg}");
    assert!(
        msg.contains("`b`") && msg.contains("overlaps") && msg.contains("`a`"),
        "{msg}"
    );
}

#[test]
fn a_block_count_that_disagrees_with_the_tensors_is_refused() {
    let w = tiny_weights(4);
    for layers in [1, 3] {
        let mut g = Gguf::default();
        tiny_metadata(&mut g, &Tiny { layers, ..TINY });
        for (name, shape, values) in &w.tensors {
            g.f32_tensor(name, shape, values);
        }
        let err = load(g.bytes(), false).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("llama.block_count"), "{msg}");
        assert!(
            msg.contains(&format!("{layers} blocks")) && msg.contains("tensors of 2 blocks"),
            "{msg}"
        );
    }
}

/// Runs `f` on another thread, failing the test if it takes more than 20 s (a hang).
fn within_20s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the call hung")
}

#[cfg(unix)]
#[test]
fn a_fifo_or_directory_is_refused_without_waiting() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for path in [fifo, dir.to_path_buf()] {
        let shown = path.display().to_string();
        let err = within_20s(move || GgufFile::open(&path).map(|_| ()).unwrap_err());
        let msg = err.to_string();
        assert!(matches!(err, LlamaError::Io { .. }), "{msg}");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(
            msg.contains(&shown) && cause.contains("not a regular file"),
            "{msg}: {cause}"
        );
    }
}

/// A GGUF file of about `mib` MiB of f32 tensors of 1 MiB each, named `t0`, `t1`, ..., each
/// filled with its index.
fn big_file(path: &Path, mib: usize) {
    let mut g = Gguf::default();
    g.meta("general.architecture", v_str("llama"));
    for i in 0..mib {
        g.f32_tensor(&format!("t{i}"), &[1 << 18], &vec![i as f32; 1 << 18]);
    }
    std::fs::write(path, g.bytes()).unwrap();
}

#[test]
fn a_file_truncated_after_opening_is_an_error() {
    let dir = scratch("truncated");
    let path = dir.join("big.gguf");
    big_file(&path, 4);
    let file = GgufFile::open(&path).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let info = file.tensor_info("t3").unwrap();
    let err = file.tensor_bytes(info).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LlamaError::FileChanged { .. }), "{msg}");
    assert!(
        msg.contains(&path.display().to_string())
            && msg.contains("changed while it was being read"),
        "{msg}"
    );
}

#[test]
fn truncation_during_a_load_is_a_clean_error_or_a_correct_load() {
    // With a memory map, this killed the process with SIGBUS.
    let dir = scratch("race");
    let path = dir.join("big.gguf");
    let mut outcomes = (0, 0);
    for round in 0..6 {
        big_file(&path, 48);
        let len = std::fs::metadata(&path).unwrap().len();
        let file = GgufFile::open(&path).unwrap();
        let truncate = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(round));
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(len / 3).unwrap();
            })
        };
        let result = (|| -> Result<(), LlamaError> {
            for (name, info) in file.tensors() {
                let bytes = file.tensor_bytes(info)?;
                let i: f32 = name[1..].parse().unwrap();
                assert!(bytes.chunks(4).all(|c| c == i.to_le_bytes()), "{name}");
            }
            Ok(())
        })();
        truncate.join().unwrap();
        match result {
            Ok(()) => outcomes.0 += 1,
            Err(LlamaError::FileChanged { .. }) => outcomes.1 += 1,
            Err(other) => panic!("round {round}: {other}"),
        }
    }
    eprintln!("complete loads, clean errors: {outcomes:?}");
    assert_eq!(outcomes.0 + outcomes.1, 6, "{outcomes:?}");
}

#[test]
fn a_header_longer_than_the_first_read_is_read_whole() {
    // About 3 MiB of vocabulary: read in 1 MiB, then 4 MiB.
    let tokens: Vec<String> = (0..300_000).map(|i| format!("tok{i}")).collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut g = Gguf::default();
    g.meta("tokenizer.ggml.tokens", v_strings(&refs));
    g.f32_tensor("w", &[4], &[1.0, 2.0, 3.0, 4.0]);
    let dir = scratch("long-header");
    let path = dir.join("long.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let read = file
        .get("tokenizer.ggml.tokens")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(read.len(), 300_000);
    let w = file.qtensor("w", &candle_core::Device::Cpu).unwrap();
    let values = w.dequantize(&candle_core::Device::Cpu).unwrap();
    assert_eq!(values.to_vec1::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}
