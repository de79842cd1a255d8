//! The GGUF reader on files written byte by byte: every value type, the tensor directory, and
//! malformed files (each a clear error, never a panic or an allocation the file cannot back).

mod common;

use candle_core::quantized::GgmlDType;
use candle_core::Device;
use common::{string, v_bool, v_f32, v_i32s, v_str, v_strings, v_u32, Gguf, Value};
use llama::gguf::{Array, GgufFile, Value as V};
use llama::LlamaError;
use proptest::prelude::*;
use test_support::Scratch;

fn parse(bytes: Vec<u8>) -> Result<GgufFile, LlamaError> {
    GgufFile::from_bytes("test.gguf", bytes)
}

fn malformed(bytes: Vec<u8>) -> String {
    match parse(bytes) {
        Err(e @ LlamaError::Malformed { .. }) => e.to_string(),
        Err(e @ LlamaError::BadValue { .. }) => e.to_string(),
        Err(other) => panic!("not a format error: {other}"),
        Ok(_) => panic!("a malformed file was accepted"),
    }
}

/// A small valid file: a few values of each kind and two tensors.
fn sample() -> Gguf {
    let mut g = Gguf::default();
    g.meta("general.architecture", v_str("llama"))
        .meta("a.u32", v_u32(7))
        .meta("a.f32", v_f32(0.5))
        .meta("a.bool", v_bool(true))
        .meta("a.strings", v_strings(&["x", "yz", ""]))
        .meta("a.i32s", v_i32s(&[-1, 2, 3]))
        .meta("a.u8", Value(0, vec![200]))
        .meta("a.i64", Value(11, (-5i64).to_le_bytes().to_vec()))
        .meta("a.f64", Value(12, 2.25f64.to_le_bytes().to_vec()));
    g.f32_tensor("w", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    g.f32_tensor("b", &[3], &[7.0, 8.0, 9.0]);
    g
}

#[test]
fn reads_every_value_type_and_the_tensors() {
    let file = parse(sample().bytes()).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(
        file.get("general.architecture"),
        Some(&V::String("llama".into()))
    );
    assert_eq!(file.get("a.u32").and_then(V::as_u64), Some(7));
    assert_eq!(file.get("a.f32").and_then(V::as_f64), Some(0.5));
    assert_eq!(file.get("a.bool").and_then(V::as_bool), Some(true));
    assert_eq!(file.get("a.u8"), Some(&V::U8(200)));
    assert_eq!(file.get("a.i64"), Some(&V::I64(-5)));
    assert_eq!(file.get("a.f64"), Some(&V::F64(2.25)));
    assert_eq!(
        file.get("a.strings").and_then(V::as_array),
        Some(&Array::String(vec!["x".into(), "yz".into(), "".into()]))
    );
    assert_eq!(
        file.get("a.i32s").and_then(V::as_array),
        Some(&Array::Signed(vec![-1, 2, 3]))
    );
    let w = file.tensor_info("w").unwrap();
    assert_eq!(w.shape, vec![2, 3]);
    assert_eq!(w.dtype, GgmlDType::F32);
    assert_eq!(w.bytes, 24);
    assert_eq!(w.start % 32, 0);
    let t = file.qtensor("w", &Device::Cpu).unwrap();
    let values = t
        .dequantize(&Device::Cpu)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(values, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
    let b = file.qtensor("b", &Device::Cpu).unwrap();
    assert_eq!(
        b.dequantize(&Device::Cpu)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        vec![7.0, 8.0, 9.0]
    );
    assert!(matches!(
        file.tensor_info("nope"),
        Err(LlamaError::MissingTensor(_))
    ));
}

#[test]
fn opens_files_from_disk_and_refuses_what_is_not_one() {
    let dir = Scratch::new("llama-gguf", "open");
    let path = dir.write("sample.gguf", sample().bytes());
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), 2);
    assert_eq!(file.path(), path);
    for bad in [dir.join("missing.gguf"), dir.to_path_buf()] {
        assert!(
            matches!(GgufFile::open(&bad), Err(LlamaError::Io { .. })),
            "{}",
            bad.display()
        );
    }
}

/// Header bytes: magic, version, tensor count, metadata count.
fn header(version: u32, tensors: u64, kvs: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b
}

#[test]
fn malformed_headers_are_clear_errors() {
    assert!(malformed(b"GGML\x03\0\0\0".to_vec()).contains("does not start with `GGUF`"));
    assert!(malformed(header(1, 0, 0)).contains("version 1"));
    assert!(malformed(header(4, 0, 0)).contains("version 4"));
    assert!(malformed(b"GGU".to_vec()).contains("needs 4 bytes"));
    // Counts no file of this size could hold: refused before reserving anything.
    assert!(malformed(header(3, u64::MAX, 0)).contains("tensor count"));
    assert!(malformed(header(3, 0, 1 << 60)).contains("metadata count"));
}

/// A file with one metadata entry whose type and payload are given raw.
fn one_value(kind: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = header(3, 0, 1);
    b.extend(string("k"));
    b.extend(kind.to_le_bytes());
    b.extend(payload);
    b
}

#[test]
fn malformed_metadata_is_a_clear_error() {
    // A string claiming more bytes than the file has.
    assert!(malformed(one_value(8, &u64::MAX.to_le_bytes())).contains("string value"));
    // An array claiming 2^40 u32 elements in a few bytes.
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend((1u64 << 40).to_le_bytes());
    assert!(malformed(one_value(9, &arr)).contains("array length"));
    // Unknown types, a bool that is neither 0 nor 1, invalid UTF-8.
    assert!(malformed(one_value(13, &[0; 8])).contains("unknown value type 13"));
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend(0u64.to_le_bytes());
    assert!(malformed(one_value(9, &arr)).contains("unknown array element type 99"));
    assert!(malformed(one_value(7, &[2])).contains("neither 0 nor 1"));
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend([0xff, 0xfe]);
    assert!(malformed(one_value(8, &bad_utf8)).contains("not UTF-8"));
    // Arrays of arrays nested past the limit.
    let mut nested = Vec::new();
    for _ in 0..20 {
        nested.extend(9u32.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
    }
    nested.extend(4u32.to_le_bytes());
    nested.extend(0u64.to_le_bytes());
    assert!(malformed(one_value(9, &nested)).contains("nested deeper"));
    // A key given twice.
    let mut g = Gguf::default();
    g.meta("k", v_u32(1)).meta("k", v_u32(2));
    assert!(malformed(g.bytes()).contains("appears twice"));
    // An alignment that is not a power of two.
    let mut g = sample();
    g.meta("general.alignment", v_u32(0));
    assert!(malformed(g.bytes()).contains("power of two"));
}

#[test]
fn malformed_tensor_directories_are_clear_errors() {
    let with = |edit: &dyn Fn(&mut Gguf)| {
        let mut g = Gguf::default();
        g.f32_tensor("w", &[2, 3], &[0.0; 6]);
        edit(&mut g);
        g.bytes()
    };
    // Data past the end of the file.
    let mut short = with(&|_| {});
    short.truncate(short.len() - 4);
    assert!(malformed(short).contains("ends past the end"));
    // Dimensions whose product overflows, too many dimensions, none.
    let huge = with(&|g| g.tensors[0].shape = vec![1 << 40, 1 << 40]);
    assert!(malformed(huge).contains("overflow"));
    assert!(malformed(with(&|g| g.tensors[0].shape = vec![1; 5])).contains("5 dimensions"));
    assert!(malformed(with(&|g| g.tensors[0].shape = vec![])).contains("0 dimensions"));
    // An unknown type, and rows that are not whole blocks (Q4_1 blocks hold 32 values).
    assert!(malformed(with(&|g| g.tensors[0].kind = 4)).contains("unknown or unsupported type 4"));
    let partial = with(&|g| {
        g.tensors[0].kind = 3;
        g.tensors[0].shape = vec![1, 48];
    });
    assert!(malformed(partial).contains("not whole blocks"));
    // A name given twice.
    let twice = with(&|g| {
        g.f32_tensor("w", &[1], &[0.0]);
    });
    assert!(malformed(twice).contains("appears twice"));
}

#[test]
fn a_misaligned_offset_is_refused() {
    let mut g = Gguf::default();
    g.f32_tensor("w", &[8], &[0.0; 8]);
    let mut bytes = g.bytes();
    // The directory's last 8 bytes before padding are the offset: make it 4.
    let dir_end = 24 + string("w").len() + 4 + 8 + 4 + 8;
    bytes[dir_end - 8..dir_end].copy_from_slice(&4u64.to_le_bytes());
    assert!(malformed(bytes).contains("not a multiple of 32"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every truncation of a valid file is an error, never a panic.
    #[test]
    fn every_truncation_is_an_error(cut in 0usize..400) {
        let bytes = sample().bytes();
        let cut = cut.min(bytes.len() - 1);
        prop_assert!(parse(bytes[..cut].to_vec()).is_err());
    }

    /// Flipping any byte of a valid file gives a file or an error, never a panic; a file that
    /// still parses hands out tensors that lie inside it.
    #[test]
    fn corrupted_bytes_never_panic(at in 0usize..400, value in any::<u8>()) {
        let mut bytes = sample().bytes();
        let at = at % bytes.len();
        bytes[at] = value;
        let len = bytes.len();
        if let Ok(file) = parse(bytes) {
            for info in file.tensors().values() {
                prop_assert!(info.start + info.bytes <= len);
                let _ = file.qtensor(&info.name, &Device::Cpu);
            }
        }
    }
}
