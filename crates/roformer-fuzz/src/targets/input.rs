//! Target `input`: the input JSON of `roformer forward` (`input_ids`, `attention_mask`,
//! `token_type_ids`, `position_ids`, each a list of equal-length lists), read by the type that
//! command reads it with (`roformer::ForwardInput`) and run through the masked-LM fixture and
//! the causal (decoder) fixture, whose forward checks the inputs (`roformer`'s `input.rs`).
//!
//! Sequences past [`MAX_TOKENS`] are skipped: attention costs `seq^2` memory by design, and
//! the commands that read text cap lengths themselves.

use std::path::PathBuf;
use std::sync::OnceLock;

use candle_core::Device;
use roformer::{
    ForwardInput, ForwardTensors, HeadModel, ModelDir, Precision, RoFormerForMaskedLM,
    RoFormerModel,
};

use crate::fixtures::{DECODER_CONFIG, DECODER_SAFETENSORS, MLM_CONFIG, MLM_SAFETENSORS};
use crate::outcome::{check_finite, Outcome};

/// The most tokens (batch times sequence length) run through the models.
pub const MAX_TOKENS: usize = 1024;

/// The fields of the input file, for the JSON mutator.
pub const FIELDS: &[&str] = ForwardInput::FIELDS;

/// Ids alone; a padded batch with every field; positions at the edge of `u32`.
pub fn seeds() -> Vec<Vec<u8>> {
    [
        r#"{"input_ids": [[2, 5, 7, 1]]}"#,
        r#"{"input_ids": [[2, 5, 7, 1], [2, 9, 0, 0]], "attention_mask": [[1, 1, 1, 1], [1, 1, 0, 0]], "token_type_ids": [[0, 0, 1, 1], [0, 0, 0, 0]], "position_ids": [[0, 1, 2, 3], [0, 1, 2, 3]]}"#,
        r#"{"input_ids": [[96, 0]], "position_ids": [[4294967294, 4294967295]]}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// The two fixture models, loaded once per process.
struct Models {
    mlm: RoFormerForMaskedLM,
    decoder: RoFormerModel,
}

fn models() -> &'static Models {
    static MODELS: OnceLock<Models> = OnceLock::new();
    MODELS.get_or_init(|| {
        let load = |config: &str, weights: &[u8]| {
            ModelDir::from_memory(PathBuf::from("fixture"), config, weights.to_vec())
        };
        let (mlm, decoder) = load(MLM_CONFIG, MLM_SAFETENSORS)
            .and_then(|mlm| Ok((mlm, load(DECODER_CONFIG, DECODER_SAFETENSORS)?)))
            .and_then(|(mlm, decoder)| {
                Ok((
                    mlm.load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)?
                        .model,
                    decoder
                        .load::<RoFormerModel>(&Device::Cpu, Precision::F32)?
                        .model,
                ))
            })
            .unwrap_or_else(|e| panic!("the fixture models do not load: {e}"));
        Models { mlm, decoder }
    })
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    Outcome::from_result(parse_and_run(data))
}

fn parse_and_run(data: &[u8]) -> Result<Outcome, String> {
    let input = ForwardInput::from_json(data).map_err(|e| e.to_string())?;
    let ForwardTensors {
        input_ids: ids,
        token_type_ids: types,
        attention_mask: mask,
        position_ids: positions,
    } = input.tensors().map_err(|e| e.to_string())?;
    if ids.elem_count() > MAX_TOKENS {
        return Err(format!("skipped: more than {MAX_TOKENS} tokens"));
    }
    let models = models();
    let run = || -> roformer::error::Result<Outcome> {
        let out = models
            .mlm
            .forward(&ids, types.as_ref(), mask.as_ref(), positions.as_ref())?;
        let hidden =
            models
                .decoder
                .forward(&ids, types.as_ref(), mask.as_ref(), positions.as_ref())?;
        Ok(check_finite(&[
            ("last_hidden_state", &out.last_hidden_state),
            ("logits", &out.logits),
            ("decoder last_hidden_state", &hidden),
        ])?)
    };
    run().map_err(|e| e.to_string())
}
