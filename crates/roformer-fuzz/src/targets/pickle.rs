//! Target `pickle`: the bytes of a `pytorch_model.bin` (a `torch.save` zip), written with the
//! fixture's `config.json` to a scratch directory and opened by `ModelDir::open` (so by
//! `Checkpoint::open`), then the model built and run once.

use std::path::Path;

use roformer::ModelDir;

use super::probe::load_and_run;
use super::scratch_dir;
use crate::fixtures::{PICKLE_BIN, PICKLE_CONFIG};
use crate::outcome::Outcome;

/// The fixture archive.
pub fn seeds() -> Vec<Vec<u8>> {
    vec![PICKLE_BIN.to_vec()]
}

/// Runs one input.
pub fn run(data: &[u8]) -> Outcome {
    let written = scratch_dir("pickle").and_then(|dir| {
        std::fs::write(dir.join("config.json"), PICKLE_CONFIG)?;
        std::fs::write(dir.join("pytorch_model.bin"), data)?;
        Ok(dir)
    });
    match written {
        Ok(dir) => Outcome::from_result(open_and_run(&dir)),
        Err(e) => Outcome::Rejected(format!("cannot write the scratch files: {e}")),
    }
}

fn open_and_run(dir: &Path) -> roformer::error::Result<Outcome> {
    load_and_run(&ModelDir::open(dir)?)
}
