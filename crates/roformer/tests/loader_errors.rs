//! Hostile and unusual checkpoints (issue 11): pickles nested deep enough to overflow a
//! recursive reader, torch strides, storages and zip entries that claim more than they hold,
//! and NaN or infinite weights. Each is a clear error or loads correctly; none panics, aborts
//! or hangs.
//!
//! The `.bin` files are written here, in `torch.save`'s layout (a zip of `archive/data.pkl`
//! and `archive/data/<key>`), so that each test says exactly which bytes it feeds the loader.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Tensor};
use roformer::{
    Checkpoint, ModelDir, ModelError, Precision, RoFormerForMaskedLM, RoFormerModel, WeightProblem,
};
use test_support::Scratch;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/model")
        .join(case)
}

/// A fresh scratch directory, unique to this call: tests run in parallel threads of one
/// process, and two of them asking for the same name must not remove each other's files.
fn scratch(name: &str) -> Scratch {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    Scratch::new("roformer-loader", &format!("{call}-{name}"))
}

/// The tensors of the `mlm_gelu` fixture (hidden 32, vocab 97).
fn mlm_tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture("mlm_gelu").join("model.safetensors"), &Device::Cpu)
        .unwrap()
}

/// A model directory with `mlm_gelu`'s config and `file` holding `bytes`.
fn model_dir(name: &str, file: &str, bytes: &[u8]) -> Scratch {
    let dir = scratch(name);
    std::fs::copy(
        fixture("mlm_gelu").join("config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    std::fs::write(dir.join(file), bytes).unwrap();
    dir
}

/// `tensors` as a safetensors file's bytes.
fn safetensors_bytes(tensors: &HashMap<String, Tensor>) -> Vec<u8> {
    let dir = scratch("st");
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(tensors, &path).unwrap();
    std::fs::read(path).unwrap()
}

/// `t` with the flat element `index` set to `value` (f32).
fn with_value(t: &Tensor, index: usize, value: f32) -> Tensor {
    let mut v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v[index] = value;
    Tensor::from_vec(v, t.dims(), &Device::Cpu).unwrap()
}

fn load_problems(dir: &Path, dtype: DType) -> Vec<WeightProblem> {
    match ModelDir::open(dir)
        .unwrap()
        .load_as::<RoFormerForMaskedLM>(dtype, &Device::Cpu)
    {
        Err(ModelError::Weights { problems, .. }) => problems.0,
        Err(other) => panic!("not a weights error: {other}"),
        Ok(_) => panic!("loaded"),
    }
}

/// One tensor of a `torch.save` archive as its pickle describes it.
struct PthTensor {
    name: String,
    /// Storage key: the entry `archive/data/<key>`.
    key: String,
    /// `FloatStorage`, `HalfStorage`, ...
    class: &'static str,
    /// Elements of the storage, as the pickle claims.
    numel: u64,
    offset: u64,
    size: Vec<u64>,
    stride: Vec<u64>,
}

impl PthTensor {
    /// A contiguous f32 tensor of `shape` in its own storage `key`.
    fn contiguous(name: &str, key: &str, shape: &[usize]) -> PthTensor {
        let mut stride = vec![1u64; shape.len()];
        for i in (1..shape.len()).rev() {
            stride[i - 1] = stride[i] * shape[i] as u64;
        }
        PthTensor {
            name: name.into(),
            key: key.into(),
            class: "FloatStorage",
            numel: shape.iter().product::<usize>() as u64,
            offset: 0,
            size: shape.iter().map(|&d| d as u64).collect(),
            stride,
        }
    }
}

fn pickle_str(p: &mut Vec<u8>, s: &str) {
    p.push(b'X');
    p.extend((s.len() as u32).to_le_bytes());
    p.extend(s.as_bytes());
}

/// An integer in the shortest form, as Python's pickler writes it (`LONG1` for claims past
/// 32 bits).
fn pickle_int(p: &mut Vec<u8>, v: u64) {
    if v < 1 << 8 {
        p.extend([b'K', v as u8]);
    } else if v < 1 << 16 {
        p.push(b'M');
        p.extend((v as u16).to_le_bytes());
    } else if v < 1 << 31 {
        p.push(b'J');
        p.extend((v as u32).to_le_bytes());
    } else {
        p.extend(b"\x8a\x08");
        p.extend(v.to_le_bytes());
    }
}

/// The pickle `torch.save(state_dict)` writes for `tensors` (protocol 2, without the memo).
fn state_dict_pickle(tensors: &[PthTensor]) -> Vec<u8> {
    let mut p = b"\x80\x02ccollections\nOrderedDict\n)R(".to_vec();
    for t in tensors {
        pickle_str(&mut p, &t.name);
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        pickle_str(&mut p, "storage");
        p.extend(format!("ctorch\n{}\n", t.class).as_bytes());
        pickle_str(&mut p, &t.key);
        pickle_str(&mut p, "cpu");
        pickle_int(&mut p, t.numel);
        p.extend(b"tQ");
        pickle_int(&mut p, t.offset);
        for dims in [&t.size, &t.stride] {
            p.push(b'(');
            for &d in dims.iter() {
                pickle_int(&mut p, d);
            }
            p.push(b't');
        }
        p.extend(b"\x89ccollections\nOrderedDict\n)RtR");
    }
    p.extend(b"u.");
    p
}

/// A zip of uncompressed `entries`, as `torch.save` writes them.
fn zip_bytes(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in entries {
        zip.start_file(name.as_str(), options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A `torch.save` archive: the pickle of `tensors` and the storages `(key, bytes)`.
fn pth_bytes(tensors: &[PthTensor], storages: Vec<(String, Vec<u8>)>) -> Vec<u8> {
    let mut entries = vec![("archive/data.pkl".to_string(), state_dict_pickle(tensors))];
    entries.push(("archive/byteorder".into(), b"little".to_vec()));
    entries.extend(
        storages
            .into_iter()
            .map(|(key, data)| (format!("archive/data/{key}"), data)),
    );
    zip_bytes(&entries)
}

fn f32_bytes(t: &Tensor) -> Vec<u8> {
    let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const WORD: &str = "roformer.embeddings.word_embeddings.weight";
const QUERY: &str = "roformer.encoder.layer.0.attention.self.query.weight";

/// `mlm_gelu` as a `torch.save` archive; `edit` may change each tensor's record and storage
/// bytes (called with the tensor's name).
fn mlm_pth(edit: impl Fn(&str, &Tensor, &mut PthTensor, &mut Vec<u8>)) -> Vec<u8> {
    let tensors = mlm_tensors();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut records = Vec::new();
    let mut storages = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let t = &tensors[name];
        let mut record = PthTensor::contiguous(name, &i.to_string(), t.dims());
        let mut data = f32_bytes(t);
        edit(name, t, &mut record, &mut data);
        records.push(record);
        storages.push((i.to_string(), data));
    }
    pth_bytes(&records, storages)
}

fn corrupt_reason(bytes: &[u8], name: &str) -> String {
    let dir = scratch(name);
    let path = dir.join("pytorch_model.bin");
    std::fs::write(&path, bytes).unwrap();
    match Checkpoint::open(&path) {
        Err(ModelError::CorruptCheckpoint { reason, .. }) => reason,
        other => panic!("{name}: {other:?}"),
    }
}

/// Issue 11 finding 3: 200 000 nested lists, and a million nested 1-tuples, overflowed the
/// stack of candle's recursive pickle reader (exit 134). The reader has no recursion and
/// refuses nesting past 1000 levels.
#[test]
fn deeply_nested_pickles_are_refused_not_a_stack_overflow() {
    let mut lists = b"\x80\x02".to_vec();
    lists.extend(std::iter::repeat_n(b']', 200_000));
    lists.extend(std::iter::repeat_n(b'a', 199_999));
    lists.push(b'.');
    let mut tuples = b"\x80\x02K\x01".to_vec();
    tuples.extend(std::iter::repeat_n(0x85u8, 1_000_000));
    tuples.push(b'.');
    for (label, pickle) in [("lists", lists), ("tuples", tuples)] {
        let bin = zip_bytes(&[("archive/data.pkl".into(), pickle)]);
        let reason = corrupt_reason(&bin, label);
        assert!(
            reason.contains("nested deeper than 1000"),
            "{label}: {reason}"
        );
    }
}

/// Pickles that claim more than they hold, or that do what `torch.save` never writes, are
/// clear errors: a 4 GiB string in a few bytes, code to run, no state dict.
#[test]
fn hostile_pickles_are_clear_errors() {
    for (label, pickle, says) in [
        (
            "huge-string",
            &b"\x80\x02X\xff\xff\xff\xffabc."[..],
            "truncated",
        ),
        (
            "stack-global",
            b"\x80\x02X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93.",
            "unsupported opcode",
        ),
        ("not-a-dict", b"\x80\x02K\x01.", "not a state dict"),
        ("no-stop", b"\x80\x02}", "without STOP"),
    ] {
        let bin = zip_bytes(&[("archive/data.pkl".into(), pickle.to_vec())]);
        let reason = corrupt_reason(&bin, label);
        assert!(reason.contains(says), "{label}: {reason}");
    }
}

/// Issue 11 finding 7: a word-embedding tensor stored transposed (valid torch strides, as
/// `torch.save({"w": t.t()})` writes) loaded, then `forward` failed with "index-select only
/// supports contiguous tensors". Loaded tensors are contiguous whatever their strides.
#[test]
fn transposed_word_embeddings_load_contiguous_and_run() {
    let bin = mlm_pth(|name, t, record, data| {
        if name == WORD {
            // The storage holds the transpose; the strides read it back as [97, 32].
            *data = f32_bytes(&t.t().unwrap().contiguous().unwrap());
            record.stride = vec![1, t.dims()[0] as u64];
        }
    });
    let model = assert_same_outputs_as_safetensors("transposed", &bin);
    assert!(model.word_embeddings().is_contiguous());
}

/// A tensor that views part of a larger storage (an offset and a padded row stride, as a
/// slice saved by `torch.save` is) loads instead of being refused as non-contiguous.
#[test]
fn tensors_viewing_part_of_a_storage_load() {
    let bin = mlm_pth(|name, t, record, data| {
        if name == QUERY {
            // Three junk elements before the data and a row stride of 40.
            let (rows, cols) = t.dims2().unwrap();
            let mut padded = vec![7.0f32; 3 + rows * 40];
            for (r, row) in t.to_vec2::<f32>().unwrap().iter().enumerate() {
                padded[3 + r * 40..3 + r * 40 + cols].copy_from_slice(row);
            }
            *data = padded.iter().flat_map(|x| x.to_le_bytes()).collect();
            record.numel = padded.len() as u64;
            record.offset = 3;
            record.stride = vec![40, 1];
        }
    });
    assert_same_outputs_as_safetensors("sliced", &bin);
}

/// Loads `bin` as `mlm_gelu`'s `pytorch_model.bin` and checks that the encoder gives exactly
/// the outputs of the fixture's safetensors file.
fn assert_same_outputs_as_safetensors(name: &str, bin: &[u8]) -> RoFormerModel {
    let dir = model_dir(name, "pytorch_model.bin", bin);
    let from_bin = ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let reference = ModelDir::open(&fixture("mlm_gelu"))
        .unwrap()
        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)
        .unwrap()
        .model;
    let ids = Tensor::new(&[[2i64, 50, 96, 3]], &Device::Cpu).unwrap();
    let a = from_bin.forward(&ids, None, None, None).unwrap();
    let b = reference.forward(&ids, None, None, None).unwrap();
    let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap();
    assert_eq!(diff.max(0).unwrap().to_scalar::<f32>().unwrap(), 0.0);
    from_bin
}

/// Storages shorter than the shape and strides claim are refused, naming the tensor, before
/// anything is allocated from the claim.
#[test]
fn storages_shorter_than_their_tensors_are_refused() {
    let bin = mlm_pth(|name, t, record, data| match name {
        // The strides step past the end of the storage.
        WORD => record.stride = vec![t.dims()[1] as u64 + 1, 1],
        // The entry holds fewer bytes than the storage's element count.
        QUERY => data.truncate(data.len() - 4),
        // An offset past the storage.
        "cls.predictions.bias" => record.offset = 1 << 40,
        _ => {}
    });
    let dir = model_dir("short", "pytorch_model.bin", &bin);
    let problems = load_problems(&dir, DType::F32);
    assert_eq!(problems.len(), 3, "{problems:?}");
    for (name, says) in [
        (WORD, "reaches element"),
        (QUERY, "fewer than its"),
        ("cls.predictions.bias", "reaches element"),
    ] {
        let found = problems.iter().any(|p| match p {
            WeightProblem::Unreadable { name: n, reason } => n == name && reason.contains(says),
            _ => false,
        });
        assert!(found, "{name}: {problems:?}");
    }

    // A shape of 2^80 elements over a 4-byte storage: refused by arithmetic, not by an
    // allocation failure.
    let huge = PthTensor {
        size: vec![1 << 40, 1 << 40],
        stride: vec![1 << 40, 1],
        ..PthTensor::contiguous("huge", "0", &[1])
    };
    let dir = scratch("huge");
    let path = dir.join("pytorch_model.bin");
    std::fs::write(&path, pth_bytes(&[huge], vec![("0".into(), vec![0; 4])])).unwrap();
    let c = Checkpoint::open(&path).unwrap();
    let err = c.read("huge", DType::F32, &Device::Cpu).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
}

/// Zip entries that claim more bytes than the file holds, and cut archives, are clear errors.
#[test]
fn zip_entries_claiming_more_than_the_file_are_refused() {
    let bin = mlm_pth(|_, _, _, _| {});
    // The central directory record of `archive/data/0`: sizes at +20 (compressed) and +24.
    let name = b"archive/data/0";
    let at = bin
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"PK\x01\x02")
        .map(|(i, _)| i)
        .find(|&i| {
            let len = u16::from_le_bytes([bin[i + 28], bin[i + 29]]) as usize;
            &bin[i + 46..i + 46 + len] == name
        })
        .expect("central record of archive/data/0");
    let mut huge = bin.clone();
    for field in [at + 20, at + 24] {
        huge[field..field + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    }
    let reason = corrupt_reason(&huge, "huge-entry");
    assert!(reason.contains("past the end of the file"), "{reason}");

    for cut in [1, 22, bin.len() / 3] {
        let reason = corrupt_reason(&bin[..bin.len() - cut], &format!("cut-{cut}"));
        assert!(!reason.is_empty());
    }
}

/// Issue 11 finding 5: one NaN in a query weight made every output NaN; an infinity in an
/// intermediate weight or in the MLM bias, and a NaN in a word-embedding row no input uses,
/// ended in non-finite logits. Each is refused at load, naming the tensor, the first bad flat
/// index and the value.
#[test]
fn non_finite_weights_are_refused_at_load_by_name_and_index() {
    let cases = [
        (QUERY, 37, f32::NAN, "NaN"),
        (
            "roformer.encoder.layer.1.intermediate.dense.weight",
            5,
            f32::INFINITY,
            "inf",
        ),
        ("cls.predictions.bias", 96, f32::NEG_INFINITY, "-inf"),
        (WORD, 96 * 32 + 31, f32::NAN, "NaN"),
    ];
    for (name, index, value, printed) in cases {
        let mut t = mlm_tensors();
        t.insert(name.into(), with_value(&t[name], index, value));
        let dir = model_dir(
            &format!("nonfinite-{index}"),
            "model.safetensors",
            &safetensors_bytes(&t),
        );
        let expected = WeightProblem::NonFinite {
            name: name.into(),
            index,
            value: printed.into(),
        };
        assert_eq!(load_problems(&dir, DType::F32), vec![expected.clone()]);
        let msg = expected.to_string();
        assert!(
            msg.contains(name) && msg.contains(&format!("index {index}")),
            "{msg}"
        );
    }
}

/// The scan reads half-precision bits directly, covers `.bin` archives and the built-in model
/// loaded from memory.
#[test]
fn non_finite_weights_are_refused_in_every_format_and_dtype() {
    let tensors = mlm_tensors();
    for dtype in [DType::F16, DType::BF16] {
        let mut t: HashMap<String, Tensor> = tensors
            .iter()
            .map(|(k, v)| (k.clone(), v.to_dtype(dtype).unwrap()))
            .collect();
        let bad = with_value(&tensors[QUERY], 100, f32::INFINITY);
        t.insert(QUERY.into(), bad.to_dtype(dtype).unwrap());
        let dir = model_dir(
            &format!("{dtype:?}"),
            "model.safetensors",
            &safetensors_bytes(&t),
        );
        let problems = load_problems(&dir, DType::F32);
        let [WeightProblem::NonFinite { name, index, .. }] = &problems[..] else {
            panic!("{dtype:?}: {problems:?}");
        };
        assert_eq!((name.as_str(), *index), (QUERY, 100), "{dtype:?}");
    }

    let bin = mlm_pth(|name, _, _, data| {
        if name == QUERY {
            data[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
        }
    });
    let dir = model_dir("nan-bin", "pytorch_model.bin", &bin);
    assert_eq!(
        load_problems(&dir, DType::F32),
        vec![WeightProblem::NonFinite {
            name: QUERY.into(),
            index: 2,
            value: "NaN".into()
        }]
    );

    let mut t = tensors.clone();
    t.insert(WORD.into(), with_value(&t[WORD], 0, f32::NAN));
    let config = std::fs::read_to_string(fixture("mlm_gelu").join("config.json")).unwrap();
    let err = ModelDir::from_memory("built-in".into(), &config, safetensors_bytes(&t))
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!("{WORD} holds NaN")),
        "{err}"
    );
}

/// Tensors the model does not read are not scanned: a bare encoder loads from a checkpoint
/// whose MLM head holds a NaN.
#[test]
fn tensors_the_model_does_not_use_are_not_scanned() {
    let mut t = mlm_tensors();
    let bias = "cls.predictions.bias";
    t.insert(bias.into(), with_value(&t[bias], 0, f32::NAN));
    let dir = model_dir("unused-nan", "model.safetensors", &safetensors_bytes(&t));
    let loaded = ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)
        .unwrap();
    assert!(loaded.unused.contains(&bias.to_string()));
}

/// A finite weight that the requested dtype cannot hold (1e5 as f16) would load as an
/// infinity; it is refused with its value and index.
#[test]
fn weights_that_overflow_the_requested_dtype_are_refused() {
    let mut t = mlm_tensors();
    t.insert(QUERY.into(), with_value(&t[QUERY], 3, 1e5));
    let dir = model_dir("overflow", "model.safetensors", &safetensors_bytes(&t));
    let problems = load_problems(&dir, DType::F16);
    assert!(
        matches!(&problems[..], [WeightProblem::Unreadable { name, reason }]
            if name == QUERY && reason.contains("100000") && reason.contains("index 3")),
        "{problems:?}"
    );
    assert!(ModelDir::open(&dir)
        .unwrap()
        .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)
        .is_ok());
}

/// Opening a FIFO used to wait for a writer forever; it is refused as not a regular file.
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting() {
    let dir = scratch("fifo");
    let fifo = dir.join("model.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let err = Checkpoint::open(&fifo).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

/// A safetensors file of `mib` f32 tensors of 1 MiB each, `t0`, `t1`, ..., each filled with
/// its index.
fn big_safetensors(path: &Path, mib: usize) {
    let tensors: HashMap<String, Tensor> = (0..mib)
        .map(|i| {
            let t = Tensor::full(i as f32, 1 << 18, &Device::Cpu).unwrap();
            (format!("t{i}"), t)
        })
        .collect();
    candle_core::safetensors::save(&tensors, path).unwrap();
}

/// Every tensor of `c`, read through [`Checkpoint::load_with`] as a model would.
fn load_all(c: &Checkpoint) -> Result<Vec<(String, Tensor)>, ModelError> {
    let loaded = c.load_with(DType::F32, &Device::Cpu, |vb| {
        c.tensors()
            .iter()
            .map(|(name, shape)| Ok((name.clone(), vb.get(shape.as_slice(), name)?)))
            .collect()
    })?;
    Ok(loaded.model)
}

fn assert_file_changed(err: ModelError, path: &Path, says: &str) {
    let msg = err.to_string();
    assert!(matches!(err, ModelError::FileChanged { .. }), "{msg}");
    assert!(
        msg.contains(&path.display().to_string())
            && msg.contains("changed while it was being read")
            && msg.contains(says),
        "{msg}"
    );
}

/// Issue 19 item 14: the loader reads with positional reads, not a map, so a file cut short
/// after it was opened is a read that comes back short, reported by name; in both formats.
#[test]
fn a_checkpoint_truncated_after_opening_is_a_file_changed_error() {
    let dir = scratch("truncated");
    let st = dir.join("model.safetensors");
    big_safetensors(&st, 4);
    let bin = dir.join("pytorch_model.bin");
    std::fs::write(&bin, mlm_pth(|_, _, _, _| {})).unwrap();
    for path in [st, bin] {
        let c = Checkpoint::open(&path).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len / 2).unwrap();
        assert_file_changed(load_all(&c).unwrap_err(), &path, "came back short");
    }
}

/// A file rewritten in place after it was opened (same size, so every read succeeds) may mix
/// old and new bytes: its modification time gives it away when the load ends.
#[test]
fn a_checkpoint_rewritten_after_opening_is_a_file_changed_error() {
    let dir = scratch("rewritten");
    let path = dir.join("model.safetensors");
    big_safetensors(&path, 2);
    let c = Checkpoint::open(&path).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    file.set_modified(an_hour_ago).unwrap();
    assert_file_changed(load_all(&c).unwrap_err(), &path, "modification time");
}

/// With a memory map this killed the process with SIGBUS: a concurrent writer truncates a
/// 48 MiB checkpoint 0 to 40 ms into its load. Each load either reads every tensor correctly
/// (the truncation came after) or fails with `FileChanged`; the test process surviving is the
/// rest of the assertion.
#[test]
fn truncation_during_a_load_is_a_clean_error_or_a_correct_load() {
    let dir = scratch("race");
    let path = dir.join("model.safetensors");
    let (mut loaded, mut changed) = (0, 0);
    for delay_ms in [0, 1, 2, 5, 10, 20, 40] {
        big_safetensors(&path, 48);
        let len = std::fs::metadata(&path).unwrap().len();
        let c = Checkpoint::open(&path).unwrap();
        let truncate = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(delay_ms));
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(len / 3).unwrap();
            })
        };
        match load_all(&c) {
            Ok(tensors) => {
                for (name, t) in tensors {
                    let i: f32 = name[1..].parse().unwrap();
                    let v = t.to_vec1::<f32>().unwrap();
                    assert!(v.iter().all(|&x| x == i), "{delay_ms} ms: {name}");
                }
                loaded += 1;
            }
            Err(err) => {
                assert_file_changed(err, &path, "");
                changed += 1;
            }
        }
        truncate.join().unwrap();
    }
    eprintln!("{loaded} loads finished first, {changed} were cut short");
}
