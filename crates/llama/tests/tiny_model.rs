//! The decoder on tiny random models written as GGUF files: against a plain f64 reference,
//! cache against one pass, batch against single sequences, the two RoPE layouts against each
//! other for every weight type, and its errors.

mod common;

use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};
use common::{logits_all, tiny_gguf, tiny_weights, TinyWeights};
use llama::generate::{generate, Sampling};
use llama::gguf::GgufFile;
use llama::{Llama, LlamaError, LoadOptions, Logits};
use rotary::Layout;
use test_support::max_abs_diff;

fn load(bytes: Vec<u8>, options: &LoadOptions) -> Llama {
    let file = GgufFile::from_bytes("tiny.gguf", bytes).unwrap();
    Llama::load(&file, options).unwrap()
}

fn options(layout: Layout, dequantize: bool) -> LoadOptions {
    LoadOptions {
        layout,
        dequantize,
        ..LoadOptions::default()
    }
}

/// `W x` for `W` row-major `[out, in]`.
fn matvec(w: &[f32], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(&a, b)| a as f64 * b).sum())
        .collect()
}

fn rms_norm(x: &[f64], weight: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(weight)
        .map(|(v, &g)| v * r * g as f64)
        .collect()
}

/// Interleaved RoPE on one head: pair `(2i, 2i+1)` rotated by `pos * base^(-2i/d)`.
fn rope_interleaved(head: &mut [f64], pos: usize, base: f64) {
    let d = head.len();
    for i in 0..d / 2 {
        let angle = pos as f64 * base.powf(-2.0 * i as f64 / d as f64);
        let (s, c) = angle.sin_cos();
        let (a, b) = (head[2 * i], head[2 * i + 1]);
        head[2 * i] = a * c - b * s;
        head[2 * i + 1] = a * s + b * c;
    }
}

/// The decoder written out in f64 loops, straight from the definitions (the GGUF's q/k rows
/// with interleaved pairs): the reference the candle model is checked against.
fn reference_logits(w: &TinyWeights, ids: &[u32]) -> Vec<Vec<f64>> {
    let t = &w.sizes;
    let d = t.hidden / t.heads;
    let groups = t.heads / t.kv_heads;
    let eps = t.eps as f64;
    let embd = w.get("token_embd.weight");
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .map(|&id| {
            embd[id as usize * t.hidden..][..t.hidden]
                .iter()
                .map(|&v| v as f64)
                .collect()
        })
        .collect();
    for l in 0..t.layers {
        let p = |part: &str| w.get(&format!("blk.{l}.{part}.weight"));
        let normed: Vec<Vec<f64>> = x.iter().map(|v| rms_norm(v, p("attn_norm"), eps)).collect();
        let mut q: Vec<Vec<f64>> = normed.iter().map(|v| matvec(p("attn_q"), v)).collect();
        let mut k: Vec<Vec<f64>> = normed.iter().map(|v| matvec(p("attn_k"), v)).collect();
        let v: Vec<Vec<f64>> = normed.iter().map(|v| matvec(p("attn_v"), v)).collect();
        for (pos, (qs, ks)) in q.iter_mut().zip(k.iter_mut()).enumerate() {
            qs.chunks_mut(d)
                .for_each(|h| rope_interleaved(h, pos, t.base as f64));
            ks.chunks_mut(d)
                .for_each(|h| rope_interleaved(h, pos, t.base as f64));
        }
        for s in 0..ids.len() {
            let mut mixed = vec![0.0; t.hidden];
            for h in 0..t.heads {
                let kvh = h / groups;
                let qh = &q[s][h * d..][..d];
                let scores: Vec<f64> = (0..=s)
                    .map(|j| {
                        let kh = &k[j][kvh * d..][..d];
                        qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
                    })
                    .collect();
                let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|z| (z - top).exp()).collect();
                let total: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for c in 0..d {
                        mixed[h * d + c] += ej / total * v[j][kvh * d + c];
                    }
                }
            }
            let out = matvec(p("attn_output"), &mixed);
            x[s].iter_mut().zip(out).for_each(|(a, b)| *a += b);
        }
        for xs in x.iter_mut() {
            let n = rms_norm(xs, p("ffn_norm"), eps);
            let g = matvec(p("ffn_gate"), &n);
            let u = matvec(p("ffn_up"), &n);
            let h: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let out = matvec(p("ffn_down"), &h);
            xs.iter_mut().zip(out).for_each(|(a, b)| *a += b);
        }
    }
    x.iter()
        .map(|xs| matvec(embd, &rms_norm(xs, w.get("output_norm.weight"), eps)))
        .collect()
}

const IDS: [u32; 9] = [3, 17, 42, 0, 49, 8, 8, 23, 11];

#[test]
fn matches_a_plain_f64_reference() {
    let w = tiny_weights(1);
    let reference = reference_logits(&w, &IDS);
    for layout in [Layout::Interleaved, Layout::Half] {
        let model = load(tiny_gguf(&w, GgmlDType::F32), &options(layout, false));
        let ours = logits_all(&model, &IDS);
        let reference: Vec<Vec<f32>> = reference
            .iter()
            .map(|r| r.iter().map(|&v| v as f32).collect())
            .collect();
        // Logits are O(1) to O(10) here; f32 products over rows of <= 96 terms, two layers
        // and softmax stay within a few 1e-6 of f64. 1e-4 leaves room and still catches any
        // wrong angle, pair, head grouping or mask (those move logits by 1e-2 or more).
        let diff = max_abs_diff(&ours, &reference);
        assert!(
            diff < 1e-4,
            "{layout:?}: max |ours - f64 reference| = {diff}"
        );
    }
}

#[test]
fn decoding_with_the_cache_equals_one_pass() {
    let w = tiny_weights(2);
    let model = load(tiny_gguf(&w, GgmlDType::F32), &LoadOptions::default());
    let whole = logits_all(&model, &IDS);
    // A small initial capacity makes the cache grow (and copy) twice on the way.
    let mut cache = model.cache(1, 2);
    let mut stepped = Vec::new();
    let prefill = Tensor::new(&IDS[..4], &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let out = model.forward(&prefill, &mut cache, Logits::All).unwrap();
    stepped.extend(out.squeeze(0).unwrap().to_vec2::<f32>().unwrap());
    for &id in &IDS[4..] {
        let x = Tensor::new(&[id], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let out = model.forward(&x, &mut cache, Logits::Last).unwrap();
        stepped.push(out.squeeze(0).unwrap().to_vec1().unwrap());
    }
    assert_eq!(cache.len(), IDS.len());
    // Same arithmetic, except that products over a growing key list may be blocked
    // differently: 1e-5 on O(1) logits.
    let diff = max_abs_diff(&whole, &stepped);
    assert!(diff < 1e-5, "cache vs one pass: {diff}");
}

#[test]
fn a_batch_equals_its_sequences_run_alone() {
    let w = tiny_weights(3);
    let model = load(tiny_gguf(&w, GgmlDType::Q8_0), &LoadOptions::default());
    let other: Vec<u32> = IDS.iter().rev().copied().collect();
    let mut cache = model.cache(2, IDS.len());
    let batch = Tensor::new(&[IDS, other.clone().try_into().unwrap()], &Device::Cpu).unwrap();
    let out = model.forward(&batch, &mut cache, Logits::All).unwrap();
    for (row, ids) in [IDS.to_vec(), other].iter().enumerate() {
        let alone = logits_all(&model, ids);
        let batched: Vec<Vec<f32>> = out.get(row).unwrap().to_vec2().unwrap();
        let diff = max_abs_diff(&alone, &batched);
        assert!(diff < 1e-5, "row {row}: {diff}");
    }
}

#[test]
fn both_layouts_give_the_same_logits_for_every_weight_type() {
    let w = tiny_weights(4);
    for kind in [
        GgmlDType::F32,
        GgmlDType::Q8_0,
        GgmlDType::Q4_1,
        GgmlDType::Q4_0,
    ] {
        for dequantize in [false, true] {
            let bytes = tiny_gguf(&w, kind);
            let a = logits_all(
                &load(bytes.clone(), &options(Layout::Interleaved, dequantize)),
                &IDS,
            );
            let b = logits_all(&load(bytes, &options(Layout::Half, dequantize)), &IDS);
            // The permuted rows hold the same blocks, so q and k are the same numbers in another
            // order; only the order of the q.k sums differs.
            let diff = max_abs_diff(&a, &b);
            assert!(diff < 1e-5, "{kind:?} dequantize={dequantize}: {diff}");
        }
    }
}

#[test]
fn quantized_kernels_stay_near_the_dequantized_weights() {
    let w = tiny_weights(5);
    for kind in [GgmlDType::Q8_0, GgmlDType::Q4_1] {
        let bytes = tiny_gguf(&w, kind);
        let quantized = logits_all(
            &load(bytes.clone(), &options(Layout::Interleaved, false)),
            &IDS,
        );
        let exact = logits_all(&load(bytes, &options(Layout::Interleaved, true)), &IDS);
        // The quantized products also round the activations to 8-bit blocks: a relative error
        // of about 1%, here at most ~0.1 on logits of size ~5. A wrong block layout or a
        // transposed weight would be off by the logits' own size.
        let diff = max_abs_diff(&quantized, &exact);
        assert!(diff < 0.2, "{kind:?}: {diff}");
    }
}

#[test]
fn greedy_generation_follows_the_argmax_of_one_pass() {
    let w = tiny_weights(6);
    let model = load(tiny_gguf(&w, GgmlDType::F32), &LoadOptions::default());
    let prompt = &IDS[..3];
    let out = generate(&model, prompt, 6, Sampling::GREEDY, None, |_| Ok(())).unwrap();
    assert_eq!(out.tokens.len(), 6);
    let mut seq = prompt.to_vec();
    seq.extend(&out.tokens[..5]);
    let all = logits_all(&model, &seq);
    for (i, &token) in out.tokens.iter().enumerate() {
        let row = &all[prompt.len() - 1 + i];
        assert_eq!(token, llama::generate::argmax(row), "token {i}");
    }
    // Sampling with a seed is reproducible, and stops at the end-of-sequence token.
    let sampling = Sampling {
        temperature: 1.0,
        seed: 9,
    };
    let a = generate(&model, prompt, 8, sampling, None, |_| Ok(())).unwrap();
    let b = generate(&model, prompt, 8, sampling, None, |_| Ok(())).unwrap();
    assert_eq!(a.tokens, b.tokens);
    let eos = a.tokens[2];
    let c = generate(&model, prompt, 8, sampling, Some(eos), |_| Ok(())).unwrap();
    let stop = a.tokens.iter().position(|&t| t == eos).unwrap();
    assert_eq!(c.tokens, a.tokens[..=stop]);
    assert!(c.stopped_at_eos);
}

#[test]
fn bad_requests_are_errors() {
    let w = tiny_weights(7);
    let model = load(tiny_gguf(&w, GgmlDType::F32), &LoadOptions::default());
    let mut cache = model.cache(1, 4);
    let bad = Tensor::new(&[[1u32, 50]], &Device::Cpu).unwrap();
    let err = model.forward(&bad, &mut cache, Logits::All).unwrap_err();
    assert!(
        matches!(
            err,
            LlamaError::TokenId {
                id: 50,
                vocab_size: 50
            }
        ),
        "{err}"
    );
    let empty = Tensor::zeros((1, 0), candle_core::DType::U32, &Device::Cpu).unwrap();
    assert!(matches!(
        model.forward(&empty, &mut cache, Logits::Last),
        Err(LlamaError::Request(_))
    ));
    let two = Tensor::new(&[[1u32], [2]], &Device::Cpu).unwrap();
    assert!(matches!(
        model.forward(&two, &mut cache, Logits::Last),
        Err(LlamaError::Request(_))
    ));
    for (prompt, max_new, temperature) in [
        (&[][..], 4, 0.0),
        (&[1u32][..], 300, 0.0), // context is 256
        (&[1u32][..], 4, f64::NAN),
        (&[1u32][..], 4, -1.0),
    ] {
        let sampling = Sampling {
            temperature,
            seed: 0,
        };
        let err = generate(&model, prompt, max_new, sampling, None, |_| Ok(())).unwrap_err();
        assert!(matches!(err, LlamaError::Request(_)), "{err}");
    }
}
