//! Test support: a GGUF writer (so each test states the bytes it feeds the reader) and tiny
//! random LLaMA models written with it.

#![allow(dead_code)]

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use llama::{Llama, Logits};
use rand::{Rng, SeedableRng};

/// A metadata value as GGUF stores it: type number and payload.
pub struct Value(pub u32, pub Vec<u8>);

pub fn v_u32(v: u32) -> Value {
    Value(4, v.to_le_bytes().to_vec())
}
pub fn v_f32(v: f32) -> Value {
    Value(6, v.to_le_bytes().to_vec())
}
pub fn v_bool(v: bool) -> Value {
    Value(7, vec![v as u8])
}
pub fn v_str(s: &str) -> Value {
    Value(8, string(s))
}
pub fn v_strings(list: &[&str]) -> Value {
    let mut b = 8u32.to_le_bytes().to_vec();
    b.extend((list.len() as u64).to_le_bytes());
    for s in list {
        b.extend(string(s));
    }
    Value(9, b)
}
pub fn v_i32s(list: &[i32]) -> Value {
    let mut b = 5u32.to_le_bytes().to_vec();
    b.extend((list.len() as u64).to_le_bytes());
    for v in list {
        b.extend(v.to_le_bytes());
    }
    Value(9, b)
}

/// A GGUF string: u64 length and bytes.
pub fn string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

/// A tensor to write: row-major shape (outermost first), ggml type number and raw bytes.
pub struct RawTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: u32,
    pub data: Vec<u8>,
}

/// Writes a GGUF version 3 file with 32-byte alignment.
#[derive(Default)]
pub struct Gguf {
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<RawTensor>,
}

impl Gguf {
    pub fn meta(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn tensor(&mut self, name: &str, shape: &[usize], kind: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push(RawTensor {
            name: name.to_string(),
            shape: shape.to_vec(),
            kind,
            data,
        });
        self
    }

    /// An f32 tensor (type 0).
    pub fn f32_tensor(&mut self, name: &str, shape: &[usize], values: &[f32]) -> &mut Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, shape, 0, data)
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, Value(kind, payload)) in &self.metadata {
            out.extend(string(key));
            out.extend(kind.to_le_bytes());
            out.extend(payload);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            out.extend(string(&t.name));
            out.extend((t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend((d as u64).to_le_bytes());
            }
            out.extend(t.kind.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset += (t.data.len() as u64).div_ceil(32) * 32;
        }
        let start = out.len().div_ceil(32) * 32;
        out.resize(start, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(start + off as usize, 0);
            out.extend(&t.data);
        }
        out
    }
}

/// Sizes of a tiny LLaMA: 2 layers, width 64, 4 query heads of 16 dims sharing 2 key/value
/// heads, feed-forward 96, vocabulary 50. Rows are multiples of 32, so every ggml block type
/// fits.
pub struct Tiny {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub base: f32,
    pub eps: f32,
}

pub const TINY: Tiny = Tiny {
    layers: 2,
    hidden: 64,
    heads: 4,
    kv_heads: 2,
    ffn: 96,
    vocab: 50,
    base: 10_000.0,
    eps: 1e-5,
};

/// The weights of a tiny model, by GGUF name, row-major, and its hyper-parameters.
pub struct TinyWeights {
    pub sizes: Tiny,
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl TinyWeights {
    pub fn get(&self, name: &str) -> &[f32] {
        &self
            .tensors
            .iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .2
    }
}

/// Random weights (seeded) for the tiny model; norms near 1 so activations stay O(1).
pub fn tiny_weights(seed: u64) -> TinyWeights {
    let t = TINY;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, around: f32| {
        let n = shape.iter().product();
        let v = (0..n)
            .map(|_| around + scale * (rng.random::<f32>() * 2.0 - 1.0))
            .collect();
        tensors.push((name, shape, v));
    };
    let (h, f, kv) = (t.hidden, t.ffn, t.kv_heads * t.hidden / t.heads);
    add("token_embd.weight".into(), vec![t.vocab, h], 1.0, 0.0);
    for l in 0..t.layers {
        let w = 1.0 / (h as f32).sqrt();
        add(format!("blk.{l}.attn_norm.weight"), vec![h], 0.2, 1.0);
        add(format!("blk.{l}.attn_q.weight"), vec![h, h], 2.0 * w, 0.0);
        add(format!("blk.{l}.attn_k.weight"), vec![kv, h], 2.0 * w, 0.0);
        add(format!("blk.{l}.attn_v.weight"), vec![kv, h], w, 0.0);
        add(format!("blk.{l}.attn_output.weight"), vec![h, h], w, 0.0);
        add(format!("blk.{l}.ffn_norm.weight"), vec![h], 0.2, 1.0);
        add(format!("blk.{l}.ffn_gate.weight"), vec![f, h], w, 0.0);
        add(format!("blk.{l}.ffn_up.weight"), vec![f, h], w, 0.0);
        add(
            format!("blk.{l}.ffn_down.weight"),
            vec![h, f],
            1.0 / (f as f32).sqrt(),
            0.0,
        );
    }
    add("output_norm.weight".into(), vec![h], 0.2, 1.0);
    TinyWeights { sizes: t, tensors }
}

/// The metadata of the tiny model (no tokenizer).
pub fn tiny_metadata(g: &mut Gguf, t: &Tiny) {
    g.meta("general.architecture", v_str("llama"))
        .meta("llama.block_count", v_u32(t.layers as u32))
        .meta("llama.context_length", v_u32(256))
        .meta("llama.embedding_length", v_u32(t.hidden as u32))
        .meta("llama.feed_forward_length", v_u32(t.ffn as u32))
        .meta("llama.attention.head_count", v_u32(t.heads as u32))
        .meta("llama.attention.head_count_kv", v_u32(t.kv_heads as u32))
        .meta("llama.rope.freq_base", v_f32(t.base))
        .meta("llama.attention.layer_norm_rms_epsilon", v_f32(t.eps))
        .meta("llama.vocab_size", v_u32(t.vocab as u32));
}

/// The tiny model as a GGUF file, its 2D weights stored as `kind` (F32, or a ggml block type
/// quantized by candle) and its norms as f32.
pub fn tiny_gguf(weights: &TinyWeights, kind: GgmlDType) -> Vec<u8> {
    let mut g = Gguf::default();
    tiny_metadata(&mut g, &weights.sizes);
    for (name, shape, values) in &weights.tensors {
        if shape.len() == 1 || kind == GgmlDType::F32 {
            g.f32_tensor(name, shape, values);
        } else {
            let t = Tensor::from_slice(values, shape.as_slice(), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&t, kind).unwrap();
            g.tensor(
                name,
                shape,
                ggml_number(kind),
                q.data().unwrap().into_owned(),
            );
        }
    }
    g.bytes()
}

/// GGUF's number of a ggml type.
pub fn ggml_number(kind: GgmlDType) -> u32 {
    match kind {
        GgmlDType::F32 => 0,
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q8_0 => 8,
        other => panic!("no number for {other:?} in the tests"),
    }
}

/// Logits `[t, vocab]` of one sequence run in one pass from an empty cache.
pub fn logits_all(model: &Llama, ids: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.cache(1, ids.len());
    let x = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let out = model.forward(&x, &mut cache, Logits::All).unwrap();
    out.squeeze(0).unwrap().to_vec2().unwrap()
}
