//! [`expected_tensors`] against the real builds: a var builder backend that records what each
//! model kind asks for.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};

use super::*;
use crate::model::Architecture;
use crate::{
    RoFormerForMaskedLM, RoFormerForSequenceClassification, RoFormerForTokenClassification,
    RoFormerModel,
};

/// `(name, shape)` of each tensor asked for, in order.
type Asked = Vec<(String, Vec<usize>)>;

/// Records every `(name, shape)` asked for and answers with zeros; `present` is what
/// `contains_tensor` says the checkpoint holds.
struct Recorder {
    asked: Arc<Mutex<Asked>>,
    present: BTreeSet<String>,
}

impl SimpleBackend for Recorder {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _init: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.push((name.to_string(), shape.dims().to_vec()));
        Tensor::zeros(shape, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        Err(candle_core::Error::CannotFindTensor {
            path: name.to_string(),
        })
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.present.contains(name)
    }
}

/// What building `M` for `cfg` asks for, in order (whether or not the build then succeeds).
fn asked<M: Architecture>(cfg: &RoFormerConfig, present: &BTreeSet<String>) -> Asked {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let backend = Recorder {
        asked: Arc::clone(&asked),
        present: present.clone(),
    };
    let vb = VarBuilder::from_backend(Box::new(backend), DType::F32, Device::Cpu);
    let _ = M::load_root(vb, cfg);
    let asked = asked.lock().unwrap_or_else(|p| p.into_inner());
    asked.clone()
}

/// The expected list with each alias taken where the checkpoint holds only the alias.
fn expected(cfg: &RoFormerConfig, kind: ModelKind, present: &BTreeSet<String>) -> Asked {
    expected_tensors(cfg, kind)
        .map(|t| {
            let name = match t.alias {
                Some(alias) if !present.contains(&t.name) && present.contains(&alias) => alias,
                _ => t.name,
            };
            (name, t.shape)
        })
        .collect()
}

fn config(extra: serde_json::Value) -> RoFormerConfig {
    let mut json = serde_json::json!({
        "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 12,
        "num_hidden_layers": 2, "vocab_size": 11, "type_vocab_size": 3,
        "max_position_embeddings": 16, "num_labels": 5,
    });
    if let (Some(base), Some(extra)) = (json.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    RoFormerConfig::from_json_str(&json.to_string()).unwrap()
}

#[test]
fn expected_tensors_are_what_every_build_asks_for() {
    let configs = [
        serde_json::json!({}),
        serde_json::json!({"model_type": "bert"}),
        serde_json::json!({"embedding_size": 6, "rotary_value": true, "tie_word_embeddings": false}),
        serde_json::json!({"attention_type": "linear", "num_hidden_layers": 3}),
        serde_json::json!({"norm_type": "rms_norm", "use_bias": false}),
        serde_json::json!({"norm_type": "rms_norm", "embedding_size": 6, "tie_word_embeddings": false}),
        serde_json::json!({"position_embedding_type": "sinusoidal", "num_hidden_layers": 0}),
        serde_json::json!({"position_embedding_type": "none", "is_decoder": true}),
        serde_json::json!({"position_embedding_type": "alibi"}),
        serde_json::json!({"position_embedding_type": "t5_relative", "relative_attention_num_buckets": 6}),
    ];
    let stored_decoder_bias: BTreeSet<String> = ["cls.predictions.decoder.bias".to_string()].into();
    for extra in configs {
        let cfg = config(extra.clone());
        for present in [BTreeSet::new(), stored_decoder_bias.clone()] {
            let cases = [
                (ModelKind::Encoder, asked::<RoFormerModel>(&cfg, &present)),
                (
                    ModelKind::MaskedLm,
                    asked::<RoFormerForMaskedLM>(&cfg, &present),
                ),
                (
                    ModelKind::SequenceClassification,
                    asked::<RoFormerForSequenceClassification>(&cfg, &present),
                ),
                (
                    ModelKind::TokenClassification,
                    asked::<RoFormerForTokenClassification>(&cfg, &present),
                ),
            ];
            for (kind, build) in cases {
                assert!(!build.is_empty(), "{extra} {kind:?}");
                assert_eq!(
                    expected(&cfg, kind, &present),
                    build,
                    "{extra} {kind:?} {present:?}"
                );
            }
        }
    }
}

#[test]
fn absurd_sizes_cost_nothing_until_iterated() {
    let cfg = config(serde_json::json!({
        "hidden_size": 4_000_000_000u64, "num_attention_heads": 1,
        "num_hidden_layers": 10_000_000u64, "position_embedding_type": "none",
    }));
    let mut tensors = expected_tensors(&cfg, ModelKind::MaskedLm);
    let word = tensors.next().unwrap();
    assert_eq!(word.name, "roformer.embeddings.word_embeddings.weight");
    assert_eq!(word.shape, [11, 4_000_000_000]);
}
