//! A model with `attention_type: "linear"` against a reference assembled here from the same
//! weights, with eq. 19 evaluated as written (`linear_attention_slow`).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use roformer::config::AttentionType;
use roformer::measure::{linear_attention_slow, Masking};
use roformer::{ModelError, RoFormerConfig, RoFormerModel};
use rotary::{Layout, Positions, Rope};
use test_support::{max_abs_diff, SplitMix64, GAMMA};

const HIDDEN: usize = 16;
const HEADS: usize = 2;
const INNER: usize = 24;
const VOCAB: usize = 30;
const LAYERS: usize = 2;

/// Deterministic pseudo-random values in [-scale, scale) (SplitMix64).
fn data(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed.wrapping_mul(GAMMA).wrapping_add(7));
    (0..len)
        .map(|_| (rng.unit_f32() * 2.0 - 1.0) * scale)
        .collect()
}

/// Random weights under transformers' names for a tiny encoder.
fn weights() -> HashMap<String, Tensor> {
    let dev = Device::Cpu;
    let mut w = HashMap::new();
    let mut seed = 0;
    let mut add = |name: String, shape: &[usize], scale: f32| {
        seed += 1;
        let n = shape.iter().product();
        w.insert(
            name,
            Tensor::from_vec(data(n, seed, scale), shape, &dev).unwrap(),
        );
    };
    add(
        "embeddings.word_embeddings.weight".into(),
        &[VOCAB, HIDDEN],
        1.0,
    );
    add(
        "embeddings.token_type_embeddings.weight".into(),
        &[2, HIDDEN],
        1.0,
    );
    add("embeddings.LayerNorm.weight".into(), &[HIDDEN], 1.0);
    add("embeddings.LayerNorm.bias".into(), &[HIDDEN], 0.1);
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        let dense = [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", INNER, HIDDEN),
            ("output.dense", HIDDEN, INNER),
        ];
        for (name, out, inp) in dense {
            add(format!("{p}.{name}.weight"), &[out, inp], 0.5);
            add(format!("{p}.{name}.bias"), &[out], 0.1);
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            add(format!("{p}.{norm}.weight"), &[HIDDEN], 1.0);
            add(format!("{p}.{norm}.bias"), &[HIDDEN], 0.1);
        }
    }
    w
}

fn config(attention_type: &str, is_decoder: bool) -> RoFormerConfig {
    RoFormerConfig::from_json_str(&format!(
        r#"{{"vocab_size": {VOCAB}, "hidden_size": {HIDDEN}, "num_hidden_layers": {LAYERS},
            "num_attention_heads": {HEADS}, "intermediate_size": {INNER}, "hidden_act": "relu",
            "is_decoder": {is_decoder}, "attention_type": "{attention_type}"}}"#
    ))
    .unwrap()
}

/// `x W^T + b` with the weights named `name`.
fn dense(w: &HashMap<String, Tensor>, name: &str, x: &Tensor) -> Tensor {
    x.broadcast_matmul(&w[&format!("{name}.weight")].t().unwrap())
        .unwrap()
        .broadcast_add(&w[&format!("{name}.bias")])
        .unwrap()
}

/// LayerNorm over the last dim (eps 1e-12, transformers' default for RoFormer).
fn layer_norm(w: &HashMap<String, Tensor>, name: &str, x: &Tensor) -> Tensor {
    let mean = x.mean_keepdim(D::Minus1).unwrap();
    let centred = x.broadcast_sub(&mean).unwrap();
    let var = centred.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
    let normed = centred
        .broadcast_div(&(var + 1e-12).unwrap().sqrt().unwrap())
        .unwrap();
    normed
        .broadcast_mul(&w[&format!("{name}.weight")])
        .unwrap()
        .broadcast_add(&w[&format!("{name}.bias")])
        .unwrap()
}

/// The encoder written out: embeddings, then per layer eq. 19 (as written), output dense,
/// residual and norm, relu feed-forward, residual and norm.
fn reference(
    w: &HashMap<String, Tensor>,
    ids: &[u32],
    keep: &[f32],
    b: usize,
    t: usize,
    masking: Masking,
) -> Tensor {
    let dev = Device::Cpu;
    let ids = Tensor::from_slice(ids, (b, t), &dev).unwrap();
    let words = w["embeddings.word_embeddings.weight"]
        .index_select(&ids.flatten_all().unwrap(), 0)
        .unwrap()
        .reshape((b, t, HIDDEN))
        .unwrap();
    let types = w["embeddings.token_type_embeddings.weight"]
        .narrow(0, 0, 1)
        .unwrap();
    let mut h = layer_norm(
        w,
        "embeddings.LayerNorm",
        &words.broadcast_add(&types).unwrap(),
    );
    let d = HIDDEN / HEADS;
    let rope = Rope::new(d, d, 10_000.0, Layout::Interleaved).unwrap();
    let coefficients = rope.coefficients(Positions::START, b, t).unwrap();
    let keep = Tensor::from_slice(keep, (b, t), &dev).unwrap();
    let heads = |x: Tensor| {
        x.reshape((b, t, HEADS, d))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
    };
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        let q = heads(dense(w, &format!("{p}.attention.self.query"), &h));
        let k = heads(dense(w, &format!("{p}.attention.self.key"), &h));
        let v = heads(dense(w, &format!("{p}.attention.self.value"), &h));
        let context = linear_attention_slow(&q, &k, &v, Some(&coefficients), Some(&keep), masking)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((b, t, HIDDEN))
            .unwrap();
        let attended = (dense(w, &format!("{p}.attention.output.dense"), &context) + &h).unwrap();
        let a = layer_norm(w, &format!("{p}.attention.output.LayerNorm"), &attended);
        let inner = dense(w, &format!("{p}.intermediate.dense"), &a)
            .relu()
            .unwrap();
        let out = (dense(w, &format!("{p}.output.dense"), &inner) + &a).unwrap();
        h = layer_norm(w, &format!("{p}.output.LayerNorm"), &out);
    }
    h
}

#[test]
fn linear_model_equals_the_reference() {
    let w = weights();
    let dev = Device::Cpu;
    let (b, t) = (2, 11);
    let ids: Vec<u32> = (0..b * t).map(|i| (i * 7 % VOCAB) as u32).collect();
    // Sequence 1 has 3 padding tokens at the end.
    let mut keep = vec![1f32; b * t];
    keep[b * t - 3..].fill(0.0);
    for (is_decoder, masking) in [(false, Masking::Bidirectional), (true, Masking::Causal)] {
        let cfg = config("linear", is_decoder);
        assert_eq!(cfg.attention_type, AttentionType::Linear);
        let vb = VarBuilder::from_tensors(w.clone(), DType::F32, &dev);
        let model = RoFormerModel::load(vb, &cfg).unwrap();
        let input = Tensor::from_slice(&ids, (b, t), &dev).unwrap();
        let mask = Tensor::from_slice(&keep, (b, t), &dev).unwrap();
        let out = model.forward(&input, None, Some(&mask), None).unwrap();
        let expected = reference(&w, &ids, &keep, b, t, masking);
        // Both sides compute in f32 from the same weights; they differ in summation order
        // (KV summaries or chunks against N x N products) and in the rotation (kernels vs the
        // same kernels): ~1e-6 after LayerNorms of unit-scale states. 1e-4 leaves room, while a
        // wrong mask, causality or rotation moves outputs by 1e-2 and more.
        let diff = max_abs_diff(&out, &expected);
        assert!(diff < 1e-4, "{masking:?}: {diff}");

        // The same weights with softmax attention give other states: the switch is real.
        let vb = VarBuilder::from_tensors(w.clone(), DType::F32, &dev);
        let softmax = RoFormerModel::load(vb, &config("softmax", is_decoder)).unwrap();
        let other = softmax.forward(&input, None, Some(&mask), None).unwrap();
        assert!(max_abs_diff(&other, &expected) > 1e-2);
    }
}

#[test]
fn attention_type_defaults_to_softmax_and_is_validated() {
    assert_eq!(
        RoFormerConfig::from_json_str("{}").unwrap().attention_type,
        AttentionType::Softmax
    );
    match RoFormerConfig::from_json_str(r#"{"attention_type": "sparse"}"#) {
        Err(ModelError::InvalidConfig { field, .. }) => assert_eq!(field, "attention_type"),
        other => panic!("{other:?}"),
    }
}
