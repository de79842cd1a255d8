//! Building a model from a checkpoint directory and running it once on a short padded batch:
//! the last step of the config, safetensors and pickle targets.

use candle_core::{Device, Tensor};
use roformer::error::Result;
use roformer::{HeadModel, ModelDir, Precision, RoFormerForMaskedLM, RoFormerModel};

use crate::outcome::{check_finite, Outcome};

/// Token ids of the probe batch, taken modulo the vocabulary so that any vocabulary size
/// gets valid ids; the last token is padding.
const IDS: [u32; 5] = [2, 5, 7, 1, 0];

/// Loads the model `dir`'s checkpoint holds (a masked LM when it has the head, else the bare
/// encoder), as the `roformer forward` command does, and runs it on the probe batch.
///
/// # Errors
/// The model errors of loading and running.
pub fn load_and_run(dir: &ModelDir) -> Result<Outcome> {
    let vocab = dir.config.vocab_size.min(u32::MAX as usize) as u32;
    let ids: Vec<u32> = IDS.iter().map(|&id| id % vocab.max(1)).collect();
    let ids = Tensor::from_vec(ids, (1, IDS.len()), &Device::Cpu)?;
    let mask = Tensor::from_vec(vec![1u32, 1, 1, 1, 0], (1, IDS.len()), &Device::Cpu)?;
    if dir.checkpoint.has_mlm_head() {
        let model = dir
            .load::<RoFormerForMaskedLM>(&Device::Cpu, Precision::F32)?
            .model;
        let out = model.forward(&ids, None, Some(&mask), None)?;
        Ok(check_finite(&[
            ("last_hidden_state", &out.last_hidden_state),
            ("logits", &out.logits),
        ])?)
    } else {
        let model = dir
            .load::<RoFormerModel>(&Device::Cpu, Precision::F32)?
            .model;
        let hidden = model.forward(&ids, None, Some(&mask), None)?;
        Ok(check_finite(&[("last_hidden_state", &hidden)])?)
    }
}
