//! Target `safetensors`: the bytes of a `model.safetensors`, opened by
//! `Checkpoint::from_safetensors_bytes` (through `ModelDir::from_memory`) with the fixture's
//! config, then the model built and run once.

use std::path::PathBuf;

use roformer::ModelDir;

use super::probe::load_and_run;
use crate::fixtures::{DECODER_SAFETENSORS, MLM_CONFIG, MLM_SAFETENSORS};
use crate::outcome::Outcome;

/// The masked-LM fixture and, for splices, a bare encoder's checkpoint.
pub fn seeds() -> Vec<Vec<u8>> {
    vec![MLM_SAFETENSORS.to_vec(), DECODER_SAFETENSORS.to_vec()]
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    let dir = ModelDir::from_memory(PathBuf::from("fuzz"), MLM_CONFIG, data.to_vec());
    Outcome::from_result(dir.and_then(|dir| load_and_run(&dir)))
}
