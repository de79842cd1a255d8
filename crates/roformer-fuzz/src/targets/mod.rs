//! The fuzz targets: one function per input format taking raw bytes, its seeds and its
//! mutator. A target returns an [`Outcome`]; a panic inside it is a finding.

pub mod config;
pub mod gguf;
pub mod input;
pub mod pickle;
mod probe;
pub mod request;
pub mod resume;
pub mod safetensors;
pub mod vocab;

use std::path::PathBuf;

use crate::mutate::{bytes, json, pickle as pickle_mutate, safetensors as st_mutate};
use crate::outcome::Outcome;
use crate::rng::Rng;

/// An input format and the code it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// `config.json`: parse, validate, build a model against a small checkpoint, run it.
    Config,
    /// `vocab.txt` and `tokenizer_config.json`: load a tokenizer, tokenize a few texts.
    Vocab,
    /// `model.safetensors` bytes: open, build a small model, run it.
    Safetensors,
    /// `pytorch_model.bin` (a `torch.save` zip): open with the pickle reader, build, run.
    Pickle,
    /// `roformer forward`'s input JSON: parse, check and run through two small models.
    Input,
    /// A GGUF file: parse, read the config and tokenizer, build the LLaMA, generate.
    Gguf,
    /// A `roformer serve` request body: decoded as every route's body and checked.
    Request,
    /// A checkpoint's `trainer_state.json`: read and checked as `train --resume` does.
    TrainerState,
    /// A checkpoint's `optimizer.safetensors`: restored into AdamW as `train --resume` does.
    Optimizer,
    /// A run's `run.json`: `roformer train mlm --resume` run on a tiny run holding it.
    RunJson,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 10] = [
        Target::Config,
        Target::Vocab,
        Target::Safetensors,
        Target::Pickle,
        Target::Input,
        Target::Gguf,
        Target::Request,
        Target::TrainerState,
        Target::Optimizer,
        Target::RunJson,
    ];

    /// The target's name on the command line and in the findings directory.
    pub fn name(self) -> &'static str {
        match self {
            Target::Config => "config",
            Target::Vocab => "vocab",
            Target::Safetensors => "safetensors",
            Target::Pickle => "pickle",
            Target::Input => "input",
            Target::Gguf => "gguf",
            Target::Request => "request",
            Target::TrainerState => "trainer-state",
            Target::Optimizer => "optimizer",
            Target::RunJson => "run-json",
        }
    }

    /// Runs the target on one input. Panics are not caught here: they are the findings.
    pub fn run(self, data: &[u8]) -> Outcome {
        match self {
            Target::Config => config::run(data),
            Target::Vocab => vocab::run(data),
            Target::Safetensors => safetensors::run(data),
            Target::Pickle => pickle::run(data),
            Target::Input => input::run(data),
            Target::Gguf => gguf::run(data),
            Target::Request => request::run(data),
            Target::TrainerState => resume::run_trainer_state(data),
            Target::Optimizer => resume::run_optimizer(data),
            Target::RunJson => resume::run_run_json(data),
        }
    }

    /// The valid inputs mutation starts from.
    pub fn seeds(self) -> Vec<Vec<u8>> {
        match self {
            Target::Config => config::seeds(),
            Target::Vocab => vocab::seeds(),
            Target::Safetensors => safetensors::seeds(),
            Target::Pickle => pickle::seeds(),
            Target::Input => input::seeds(),
            Target::Gguf => gguf::seeds(),
            Target::Request => request::seeds(),
            Target::TrainerState => resume::trainer_state_seeds(),
            Target::Optimizer => resume::optimizer_seeds(),
            Target::RunJson => resume::run_json_seeds(),
        }
    }

    /// The longest input the mutators make: room for deep nesting (100 000 levels) and for
    /// the checkpoints with grown headers.
    pub fn max_len(self) -> usize {
        match self {
            Target::Config
            | Target::Input
            | Target::Vocab
            | Target::Request
            | Target::TrainerState
            | Target::RunJson => 1 << 20,
            Target::Safetensors | Target::Pickle | Target::Gguf | Target::Optimizer => 4 << 20,
        }
    }

    /// A mutant of `data`: one to three stacked mutations, format-aware most of the time;
    /// `other` (another corpus input) feeds splices.
    pub fn mutate(self, rng: &mut Rng, data: &[u8], other: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        for _ in 0..1 + rng.below(3) {
            let aware = !rng.one_in(4);
            let next = match self {
                Target::Vocab => Some(vocab::mutate(rng, &out, other, self.max_len())),
                Target::Config if aware => json::mutate(rng, &out, config::FIELDS),
                Target::Input if aware => json::mutate(rng, &out, input::FIELDS),
                Target::Request if aware => json::mutate(rng, &out, request::FIELDS),
                Target::TrainerState if aware => json::mutate(rng, &out, resume::STATE_FIELDS),
                Target::RunJson if aware => json::mutate(rng, &out, resume::RUN_FIELDS),
                Target::Safetensors | Target::Optimizer if aware => st_mutate::mutate(rng, &out),
                Target::Pickle if aware => pickle_mutate::mutate(rng, &out),
                _ => None,
            };
            out = match next {
                Some(next) if next.len() <= self.max_len() => next,
                _ => {
                    bytes::mutate(rng, &mut out, other, self.max_len());
                    out
                }
            };
        }
        out
    }
}

impl Target {
    /// A libFuzzer custom mutator's step: mutates the `size`-byte input at the start of
    /// `data` in place (one call of [`Target::mutate`] seeded by `seed`) and returns its new
    /// length, at most `max_size` and `data.len()`.
    pub fn mutate_in_place(
        self,
        data: &mut [u8],
        size: usize,
        max_size: usize,
        seed: u64,
    ) -> usize {
        let input = &data[..size.min(data.len())];
        let out = self.mutate(&mut Rng::new(seed), input, input);
        let len = out.len().min(max_size).min(data.len());
        data[..len].copy_from_slice(&out[..len]);
        len
    }
}

/// A scratch directory of this process for target `name`'s files, created on first use
/// (`roformer-fuzz-<pid>/<name>` in the temporary directory).
///
/// # Errors
/// When the directory cannot be created.
pub fn scratch_dir(name: &str) -> std::io::Result<PathBuf> {
    let dir = process_scratch().join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// This process's scratch directory (not created).
pub fn process_scratch() -> PathBuf {
    scratch_of(std::process::id())
}

/// The scratch directory of process `pid`: what to remove after a worker died.
pub fn scratch_of(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("roformer-fuzz-{pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_accepted() {
        for target in Target::ALL {
            if target == Target::RunJson && resume::roformer_binary().is_none() {
                eprintln!("run-json not checked: no roformer binary beside this test");
                continue;
            }
            for (i, seed) in target.seeds().iter().enumerate() {
                let outcome = target.run(seed);
                assert_eq!(outcome, Outcome::Accepted, "{} seed {i}", target.name());
            }
        }
    }

    #[test]
    fn in_place_mutation_fits_the_buffer() {
        let seed = br#"{"input_ids": [[2, 5, 7, 1]]}"#;
        for i in 0..100 {
            let mut data = vec![0u8; 64];
            data[..seed.len()].copy_from_slice(seed);
            let len = Target::Input.mutate_in_place(&mut data, seed.len(), 48, i);
            assert!(len <= 48);
        }
    }

    #[test]
    fn mutants_stay_under_the_length_cap() {
        let mut rng = Rng::new(1);
        for target in Target::ALL {
            let seeds = target.seeds();
            for _ in 0..50 {
                let out = target.mutate(&mut rng, &seeds[0], &seeds[seeds.len() - 1]);
                assert!(out.len() <= target.max_len());
            }
        }
    }
}
