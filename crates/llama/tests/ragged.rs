//! `Llama::forward_ragged` against `Llama::forward`: several sequences of different lengths,
//! prefilled in chunks and decoded in one pass per step, each joining at another step, give
//! every sequence the logits it gets alone; and its errors.

mod common;

use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};
use common::{tiny_gguf, tiny_weights};
use llama::gguf::GgufFile;
use llama::{Chunk, KvCache, Llama, LlamaError, LoadOptions, Logits};

fn load(kind: GgmlDType) -> Llama {
    let bytes = tiny_gguf(&tiny_weights(5), kind);
    let file = GgufFile::from_bytes("tiny.gguf", bytes).unwrap();
    Llama::load(&file, &LoadOptions::default()).unwrap()
}

/// What one sequence runs at each step: `None` (not running yet), or its new tokens and
/// whether it wants their last logits.
type Plan = Vec<Vec<Option<(Vec<u32>, bool)>>>;

/// Three sequences (prompts of 5, 1 and 9 tokens) over four steps: the first two join at
/// once, the third joins at the second step and is prefilled in two chunks (4 then 5 tokens,
/// no logits for the first), the others decode one token a step meanwhile.
fn plan() -> Plan {
    let some = |ids: &[u32], logits: bool| Some((ids.to_vec(), logits));
    vec![
        vec![some(&[3, 14, 15, 9, 2], true), some(&[6], true), None],
        vec![
            some(&[5], true),
            some(&[35], true),
            some(&[8, 9, 7, 9], false),
        ],
        vec![
            some(&[8], true),
            some(&[4], true),
            some(&[3, 2, 3, 8, 4], true),
        ],
        vec![some(&[6], true), some(&[2], true), some(&[6], true)],
    ]
}

/// The logits each sequence gets at each step where it asks for them, running each chunk
/// alone with `forward`.
fn alone(model: &Llama, plan: &Plan) -> Vec<Vec<Vec<f32>>> {
    let sequences = plan[0].len();
    (0..sequences)
        .map(|s| {
            let mut cache = model.cache(1, 4);
            let mut out = Vec::new();
            for step in plan {
                if let Some((ids, logits)) = &step[s] {
                    let x = Tensor::new(ids.as_slice(), &Device::Cpu)
                        .unwrap()
                        .unsqueeze(0)
                        .unwrap();
                    let last = model.forward(&x, &mut cache, Logits::Last).unwrap();
                    if *logits {
                        out.push(last.squeeze(0).unwrap().to_vec1::<f32>().unwrap());
                    }
                }
            }
            out
        })
        .collect()
}

/// The same logits from one `forward_ragged` pass per step over every running sequence.
fn together(model: &Llama, plan: &Plan) -> Vec<Vec<Vec<f32>>> {
    let sequences = plan[0].len();
    let mut caches: Vec<KvCache> = (0..sequences).map(|_| model.cache(1, 4)).collect();
    let mut out = vec![Vec::new(); sequences];
    for step in plan {
        let mut chunks = Vec::new();
        let mut asking = Vec::new();
        for (s, (part, cache)) in step.iter().zip(caches.iter_mut()).enumerate() {
            if let Some((ids, logits)) = part {
                chunks.push(Chunk {
                    ids,
                    cache,
                    logits: *logits,
                });
                if *logits {
                    asking.push(s);
                }
            }
        }
        let logits = model.forward_ragged(&mut chunks).unwrap();
        let rows = logits.to_vec2::<f32>().unwrap();
        assert_eq!(rows.len(), asking.len());
        for (s, row) in asking.into_iter().zip(rows) {
            out[s].push(row);
        }
    }
    out
}

#[test]
fn each_sequence_gets_its_lone_logits_bit_for_bit_on_quantized_weights() {
    // Every row-wise product here (our Q4_1 kernel, candle's Q8_0 and Q4_0 ones) computes each
    // row on its own, and attention runs per sequence: the bits cannot depend on the batch.
    for kind in [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q4_0] {
        let model = load(kind);
        let plan = plan();
        assert_eq!(together(&model, &plan), alone(&model, &plan), "{kind:?}");
    }
}

#[test]
fn each_sequence_gets_its_lone_logits_on_dense_weights() {
    // Dense products go through candle's f32 matmul, whose blocking may change with the
    // number of rows, and so the order of the sums: equal within f32 rounding of logits
    // near 10 (1e-4), not bit for bit.
    let model = load(GgmlDType::F32);
    let plan = plan();
    let (a, b) = (together(&model, &plan), alone(&model, &plan));
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        let diff = test_support::max_abs_diff(x.as_slice(), y.as_slice());
        assert!(diff < 1e-4, "{diff}");
    }
}

#[test]
fn bad_steps_are_errors_and_leave_the_caches_as_they_were() {
    let model = load(GgmlDType::Q8_0);
    let mut cache = model.cache(1, 4);
    let mut pair = model.cache(2, 4);
    let err = |chunks: &mut [Chunk<'_>]| model.forward_ragged(chunks).unwrap_err();
    assert!(matches!(err(&mut []), LlamaError::Request(m) if m.contains("no sequence")));
    let empty = Chunk {
        ids: &[],
        cache: &mut cache,
        logits: true,
    };
    assert!(matches!(err(&mut [empty]), LlamaError::Request(m) if m.contains("no tokens")));
    let two = Chunk {
        ids: &[1],
        cache: &mut pair,
        logits: true,
    };
    assert!(matches!(err(&mut [two]), LlamaError::Request(m) if m.contains("2 sequences")));
    let mut other = model.cache(1, 4);
    let chunks = &mut [
        Chunk {
            ids: &[1, 2],
            cache: &mut cache,
            logits: true,
        },
        Chunk {
            ids: &[50],
            cache: &mut other,
            logits: true,
        },
    ];
    assert!(matches!(
        err(chunks),
        LlamaError::TokenId {
            id: 50,
            vocab_size: 50
        }
    ));
    assert_eq!((cache.len(), other.len()), (0, 0), "no cache moved on");
    // A step of no logits runs and moves the caches on.
    let mut chunks = [Chunk {
        ids: &[1, 2],
        cache: &mut cache,
        logits: false,
    }];
    let logits = model.forward_ragged(&mut chunks).unwrap();
    assert_eq!(logits.dims(), [0, 50]);
    assert_eq!(cache.len(), 2);
}
