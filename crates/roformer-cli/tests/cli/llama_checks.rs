//! What `roformer llama ...` and `roformer bench llama` refuse (issue 19, items 7, 11, 12, 13,
//! 14): GGUF files with NaN weights or block scales, out-of-range token ids, overlapping tensor
//! data or a wrong block count; a FIFO; a file truncated during the load; a `--repeats` whose
//! timings would not fit in memory. Each a clear error, never a hang or a signal.

#[path = "../../../llama/tests/common/mod.rs"]
mod gguf_writer;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use llama::gguf::GgufFile;

use crate::common::{roformer, run_while_truncating};
use test_support::Scratch;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../llama/tests/fixtures/tiny-llama/tiny.gguf")
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-cli-llama-checks", name)
}

/// Writes the fixture, changed by `edit`, to `DIR/name.gguf`.
fn edited(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<u8>, &GgufFile)) -> String {
    let mut bytes = std::fs::read(fixture()).unwrap();
    let file = GgufFile::open(fixture()).unwrap();
    edit(&mut bytes, &file);
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// Where the fixture's u32 metadata value of `key` lies.
fn u32_value_at(bytes: &[u8], key: &str) -> usize {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend(key.as_bytes());
    needle.extend(4u32.to_le_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle);
    at.unwrap() + needle.len()
}

/// Where the directory entry of tensor `name` keeps its data offset.
fn offset_field(bytes: &[u8], file: &GgufFile, name: &str) -> usize {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend(name.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle);
    let dims = file.tensor_info(name).unwrap().shape.len();
    at.unwrap() + needle.len() + 4 + 8 * dims + 4
}

/// Runs `roformer args`, asserting it fails within 60 s (no hang) with every one of `says` in
/// its error.
fn fails_saying(args: &[&str], says: &[&str]) {
    let out = roformer(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    for s in says {
        assert!(stderr.contains(s), "{args:?}: no {s:?} in {stderr}");
    }
}

fn ids_file(dir: &Path) -> String {
    let path = dir.join("ids.json");
    std::fs::write(&path, r#"{"input_ids": [[1, 2, 3]]}"#).unwrap();
    path.display().to_string()
}

#[test]
fn non_finite_weights_and_block_scales_are_refused_on_every_path() {
    let dir = scratch("nan");
    let norm = edited(&dir, "norm", |b, f| {
        let start = f.tensor_info("blk.0.attn_norm.weight").unwrap().start;
        b[start + 8..start + 12].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    let scale = edited(&dir, "scale", |b, f| {
        // The Q8_0 scale `d` of block 1 (34-byte blocks) becomes an f16 infinity.
        let start = f.tensor_info("blk.1.attn_q.weight").unwrap().start;
        b[start + 34..start + 36].copy_from_slice(&[0x00, 0x7c]);
    });
    let (ids, out) = (ids_file(&dir), dir.join("out.safetensors"));
    let out = out.to_str().unwrap();
    let norm_says = [
        "`blk.0.attn_norm.weight` holds NaN at index 2",
        "must be finite",
    ];
    let scale_says = ["`blk.1.attn_q.weight` holds inf", "scale `d` of block 1"];
    for (file, says) in [(&norm, &norm_says), (&scale, &scale_says)] {
        let gen = ["llama", "generate", "--gguf", file, "--max-new-tokens", "4"];
        fails_saying(&[&gen[..], &["the cat"]].concat(), says);
        fails_saying(
            &[&gen[..], &["--temperature", "1", "the cat"]].concat(),
            says,
        );
        fails_saying(&[&gen[..], &["--dequantize", "the cat"]].concat(), says);
        let logits = [
            "llama", "logits", "--gguf", file, "--input", &ids, "--output", out,
        ];
        fails_saying(&logits, says);
    }
    assert!(!Path::new(out).exists());
}

#[test]
fn malformed_gguf_metadata_is_refused() {
    let dir = scratch("metadata");
    let pad = edited(&dir, "pad", |b, _| {
        let at = u32_value_at(b, "tokenizer.ggml.padding_token_id");
        b[at..at + 4].copy_from_slice(&9999u32.to_le_bytes());
    });
    let overlap = edited(&dir, "overlap", |b, f| {
        let from = offset_field(b, f, "blk.0.ffn_gate.weight");
        let to = offset_field(b, f, "blk.0.ffn_up.weight");
        let offset: [u8; 8] = b[from..from + 8].try_into().unwrap();
        b[to..to + 8].copy_from_slice(&offset);
    });
    let blocks = edited(&dir, "blocks", |b, _| {
        let at = u32_value_at(b, "llama.block_count");
        b[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    });
    fn gen(file: &str) -> Vec<&str> {
        vec!["llama", "generate", "--gguf", file, "hello"]
    }
    fails_saying(
        &gen(&pad),
        &["tokenizer.ggml.padding_token_id", "9999", "below 64"],
    );
    fails_saying(&gen(&overlap), &["overlaps", "blk.0.ffn_gate.weight"]);
    fails_saying(
        &gen(&blocks),
        &["llama.block_count", "1 blocks", "tensors of 2 blocks"],
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_as_the_gguf_is_refused_without_waiting() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.gguf");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap();
    let (ids, out) = (ids_file(&dir), dir.join("out.safetensors"));
    let out = out.to_str().unwrap();
    for args in [
        &["llama", "generate", "--gguf", fifo, "hello"][..],
        &[
            "llama", "logits", "--gguf", fifo, "--input", &ids, "--output", out,
        ],
        &["bench", "llama", "--gguf", fifo, "--repeats", "1"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_roformer"))
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("{args:?} hung on the FIFO");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains("not a regular file"), "{args:?}: {stderr}");
    }
}

/// A one-block model with a 100 000-token vocabulary: a 25.6 MB f32 embedding, so that the
/// load takes long enough to be cut short.
fn big_model(path: &Path) {
    let mut weights = gguf_writer::tiny_weights(5);
    let vocab = 100_000;
    weights.tensors.retain(|(n, _, _)| !n.starts_with("blk.1."));
    weights.tensors[0] = (
        "token_embd.weight".into(),
        vec![vocab, 64],
        (0..vocab * 64).map(|i| (i % 7) as f32 * 0.1).collect(),
    );
    let sizes = gguf_writer::Tiny {
        layers: 1,
        vocab,
        ..gguf_writer::TINY
    };
    let mut g = gguf_writer::Gguf::default();
    gguf_writer::tiny_metadata(&mut g, &sizes);
    for (name, shape, values) in &weights.tensors {
        g.f32_tensor(name, shape, values);
    }
    std::fs::write(path, g.bytes()).unwrap();
}

#[test]
fn a_gguf_truncated_during_the_load_is_a_clean_error_never_a_signal() {
    let dir = scratch("truncate");
    let (gguf, ids, out) = (
        dir.join("big.gguf"),
        ids_file(&dir),
        dir.join("out.safetensors"),
    );
    let args = [
        "llama",
        "logits",
        "--gguf",
        gguf.to_str().unwrap(),
        "--input",
        &ids,
        "--output",
        out.to_str().unwrap(),
    ];
    let mut changed = 0;
    for delay_ms in [0, 5, 10, 20, 40, 80] {
        big_model(&gguf);
        let (success, stderr) = run_while_truncating(&args, &gguf, delay_ms);
        if !success {
            assert!(
                stderr.contains("changed while it was being read")
                    || stderr.contains("ends past the end"),
                "{delay_ms} ms: {stderr}"
            );
            changed += stderr.contains("changed while it was being read") as usize;
        }
    }
    eprintln!("{changed} of 6 loads were cut short during the tensor reads");
}

#[test]
fn bench_llama_refuses_repeats_whose_timings_would_not_fit() {
    let gguf = fixture();
    fails_saying(
        &[
            "bench",
            "llama",
            "--gguf",
            gguf.to_str().unwrap(),
            "--repeats",
            "1000000000",
        ],
        &["--repeats 1000000000 would need", "GiB", "at most"],
    );
}
