//! What a training run will allocate, estimated from the config and the batch shape before
//! anything is allocated, so that a run too large for the machine is refused with the sizes
//! that ask for the memory instead of aborting on an allocation failure.
//!
//! The estimate, in bytes, for `P` parameters, micro-batches of `B` sequences of `T` tokens,
//! `L` layers of width `H` and feed-forward width `I`, and a head of `V` outputs per position
//! (the vocabulary for masked LM, the labels for classification):
//!
//! ```text
//! 28 P                              weights, gradients, AdamW's two moments (4 x 4 bytes),
//!                                   and the checkpoint's serialised weights and moments
//!                                   while it is saved (3 x 4 bytes)
//! + 4 B T L (10 H + 2 I)            activations kept for the backward pass, per layer
//! + 4 B T 2 V                       the head's logits and their gradient
//! + 64 MiB                          the program, the tokenizer and its jieba dictionary
//! ```
//!
//! The two per-token constants were fitted on measured peaks (`/usr/bin/time -v`, `train mlm`
//! on the poetry sample, vocabulary 2733, batch 32 of 128 tokens): hidden 256 / 4 layers /
//! feed-forward 1024 peaked at 524 508 KiB, 8 layers at 917 552 KiB, hidden 512 / feed-forward
//! 2048 / 4 layers at 1 120 228 KiB; the fit gives 28.1 bytes per parameter and 4 642 floats
//! per token and layer (`10 H + 2 I` = 4 608). The corpus's own memory (its text, tokens and
//! blocks, about 4 bytes per character read and 8 per token) comes on top and is not counted.

use crate::config::RoFormerConfig;
use crate::memory::{check_fits, Bytes, TooLarge};
use crate::shapes::{expected_tensors, ModelKind};

/// Bytes per parameter: weights, gradients and two AdamW moments in f32, plus the serialised
/// weights and moments of a checkpoint being saved.
pub const BYTES_PER_PARAMETER: u64 = 28;

/// What the program itself holds besides the model and the batch: code, the tokenizer and the
/// jieba dictionary (a 2-step `train mlm` of a 0.25 M-parameter model peaks at 59 MiB).
pub const FIXED_BYTES: u64 = 64 << 20;

/// A run's estimated memory, by part (bytes; see the [module](self) for the formula).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainingMemory {
    /// Trainable parameters.
    pub parameters: u64,
    /// `28 P`: weights, gradients, optimiser moments and a checkpoint being saved.
    pub model_state: u64,
    /// Activations of one micro-batch kept for the backward pass, the head's included.
    pub activations: u64,
    /// [`FIXED_BYTES`].
    pub fixed: u64,
}

impl TrainingMemory {
    /// The sum of the parts.
    pub fn total(&self) -> u64 {
        self.model_state
            .saturating_add(self.activations)
            .saturating_add(self.fixed)
    }
}

/// The elements of the tensors `kind` of `cfg` reads when it has `layers` layers.
fn elements(cfg: &RoFormerConfig, kind: ModelKind, layers: usize) -> u128 {
    let cfg = RoFormerConfig {
        num_hidden_layers: layers,
        ..cfg.clone()
    };
    expected_tensors(&cfg, kind)
        .map(|t| t.shape.iter().map(|&d| d as u128).product::<u128>())
        .sum()
}

/// The parameters of `kind` built from `cfg`, computed from the shapes alone (one layer is
/// listed and multiplied, so a config of a million layers costs nothing).
pub fn parameter_count(cfg: &RoFormerConfig, kind: ModelKind) -> u128 {
    let (without, with_one) = (elements(cfg, kind, 0), elements(cfg, kind, 1));
    without + (with_one - without) * cfg.num_hidden_layers as u128
}

/// Estimates what training `kind` of `cfg` on micro-batches of `batch` sequences of `seq_len`
/// tokens allocates at its peak (the formula is in the [module](self) doc; it is within 2x of
/// the measured peak, see the tests). Saturates at `u64::MAX` bytes.
pub fn estimate_training_memory(
    cfg: &RoFormerConfig,
    kind: ModelKind,
    batch: usize,
    seq_len: usize,
) -> TrainingMemory {
    let parameters = parameter_count(cfg, kind);
    let outputs = match kind {
        ModelKind::MaskedLm => cfg.vocab_size,
        ModelKind::SequenceClassification | ModelKind::TokenClassification => cfg.num_labels,
        ModelKind::Encoder => 0,
    } as u128;
    let (h, i, layers) = (
        cfg.hidden_size as u128,
        cfg.intermediate_size as u128,
        cfg.num_hidden_layers as u128,
    );
    let tokens = batch as u128 * seq_len as u128;
    let per_token = layers * (10 * h + 2 * i) + 2 * outputs;
    let clamp = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
    TrainingMemory {
        parameters: clamp(parameters),
        model_state: clamp(parameters.saturating_mul(BYTES_PER_PARAMETER as u128)),
        activations: clamp(tokens.saturating_mul(per_token).saturating_mul(4)),
        fixed: FIXED_BYTES,
    }
}

/// Refuses a run whose [`estimate_training_memory`] exceeds the memory
/// [available](crate::memory::available) now, naming the sizes that ask for it.
///
/// # Errors
/// [`TooLarge`]: the estimate, its parts, and the memory available.
pub fn check_training_memory(
    cfg: &RoFormerConfig,
    kind: ModelKind,
    batch: usize,
    seq_len: usize,
) -> Result<TrainingMemory, TooLarge> {
    let m = estimate_training_memory(cfg, kind, batch, seq_len);
    check_fits(
        || {
            format!(
                "training {} parameters ({} layers of width {}, feed-forward {}; {} with the \
                 optimiser) on batches of {batch} x {seq_len} tokens ({} of activations)",
                m.parameters,
                cfg.num_hidden_layers,
                cfg.hidden_size,
                cfg.intermediate_size,
                Bytes(m.model_state),
                Bytes(m.activations)
            )
        },
        m.total(),
    )?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config of the measured run: hidden 256, 4 layers, 4 heads, feed-forward 1024,
    /// rotary, the poetry sample's 2733-token vocabulary.
    fn measured_config(layers: usize, hidden: usize) -> RoFormerConfig {
        let json = format!(
            r#"{{"hidden_size": {hidden}, "num_hidden_layers": {layers},
                "num_attention_heads": 4, "intermediate_size": {},
                "max_position_embeddings": 512, "vocab_size": 2733}}"#,
            4 * hidden
        );
        RoFormerConfig::from_json_str(&json).unwrap()
    }

    #[test]
    fn the_parameter_count_is_the_built_models() {
        // `train mlm` reported these counts for the measured runs.
        let count =
            |layers, hidden| parameter_count(&measured_config(layers, hidden), ModelKind::MaskedLm);
        assert_eq!(count(4, 256), 3_928_749);
        assert_eq!(count(8, 256), 7_087_789);
        assert_eq!(count(4, 512), 14_277_293);
    }

    /// Peak RSS measured once with `/usr/bin/time -v roformer train mlm --config C --vocab
    /// V --corpus crates/roformer/tests/fixtures/poetry --seq-len 128 --batch 32 --steps 2`:
    /// (layers, hidden, KiB).
    const MEASURED: [(usize, usize, u64); 3] =
        [(4, 256, 524_508), (8, 256, 917_552), (4, 512, 1_120_228)];

    #[test]
    fn the_estimate_is_within_2x_of_the_measured_peak() {
        for (layers, hidden, kib) in MEASURED {
            let m = estimate_training_memory(
                &measured_config(layers, hidden),
                ModelKind::MaskedLm,
                32,
                128,
            );
            let (estimate, peak) = (m.total() as f64, (kib * 1024) as f64);
            let ratio = estimate / peak;
            assert!(
                (0.5..=2.0).contains(&ratio),
                "{layers} layers of {hidden}: estimate {estimate}, measured {peak}"
            );
        }
    }

    #[test]
    fn huge_sizes_saturate_and_are_refused() {
        let cfg = measured_config(1_000_000, 256);
        let m = estimate_training_memory(&cfg, ModelKind::MaskedLm, usize::MAX, usize::MAX);
        assert_eq!(m.activations, u64::MAX);
        assert_eq!(m.total(), u64::MAX);
        let e = check_training_memory(&cfg, ModelKind::MaskedLm, 16, 128).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("1000000 layers of width 256"), "{text}");
        assert!(text.contains("available"), "{text}");
        let small = measured_config(1, 64);
        assert!(check_training_memory(&small, ModelKind::MaskedLm, 2, 16).is_ok());
    }
}
