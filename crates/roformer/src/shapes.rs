//! The tensors a model reads from its checkpoint, computed from the config alone, and their
//! comparison with a checkpoint's stored shapes before anything is built.
//!
//! A config states sizes (hidden size, layers, vocabulary) that the checkpoint must back with
//! tensors. [`expected_tensors`] lists, lazily, the name and shape of every tensor the build of
//! a [`ModelKind`] asks its var builder for: exactly what the model's `load` functions ask,
//! in the same order (a test builds each kind and compares). [`check`] compares that list with
//! [`Checkpoint::tensors`] without allocating anything the config sizes, so a config claiming a
//! hidden size of 4e9 or ten million layers fails with the differences, in time and memory
//! bounded by the checkpoint's own tensor list, instead of attempting what it claims.

use std::collections::BTreeSet;

use crate::config::{NormType, PositionEmbeddingType, RoFormerConfig};
use crate::error::WeightProblem;
use crate::weights::Checkpoint;

/// Which model is built from a checkpoint: the encoder alone or with a task head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// [`crate::RoFormerModel`]: embeddings and encoder.
    Encoder,
    /// [`crate::RoFormerForMaskedLM`]: the encoder and `cls.predictions`.
    MaskedLm,
    /// [`crate::RoFormerForSequenceClassification`]: the encoder and a classifier on the first
    /// token (`classifier.*`, plus `bert.pooler` for BERT).
    SequenceClassification,
    /// [`crate::RoFormerForTokenClassification`]: the encoder and a per-token `classifier`.
    TokenClassification,
}

/// One tensor the build reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedTensor {
    /// Its name as the model asks for it (with the `roformer.` or `bert.` prefix of a head
    /// model's checkpoint; [`Checkpoint::resolve`] serves unprefixed files).
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// A name read instead when the checkpoint holds only that one (the MLM bias, stored as
    /// `cls.predictions.decoder.bias` by some versions).
    pub alias: Option<String>,
}

/// The tensors of one block, in the order the block asks for them.
struct Block {
    scope: String,
    tensors: Vec<ExpectedTensor>,
}

impl Block {
    fn new(scope: impl Into<String>) -> Block {
        Block {
            scope: scope.into(),
            tensors: Vec::new(),
        }
    }

    fn tensor(&mut self, name: &str, shape: &[usize]) {
        self.tensors.push(ExpectedTensor {
            name: format!("{}.{name}", self.scope),
            shape: shape.to_vec(),
            alias: None,
        });
    }

    /// A `Linear` from `in_dim` to `out_dim` at `name`: weight `[out, in]`, then bias `[out]`.
    fn linear(&mut self, name: &str, in_dim: usize, out_dim: usize, bias: bool) {
        self.tensor(&format!("{name}.weight"), &[out_dim, in_dim]);
        if bias {
            self.tensor(&format!("{name}.bias"), &[out_dim]);
        }
    }

    /// A layer norm's weight and bias of `size` at `name`.
    fn layer_norm(&mut self, name: &str, size: usize) {
        self.tensor(&format!("{name}.weight"), &[size]);
        self.tensor(&format!("{name}.bias"), &[size]);
    }

    /// The block norm the config asks for: a layer norm, or nothing for RMS norm.
    fn norm(&mut self, name: &str, size: usize, cfg: &RoFormerConfig) {
        if cfg.norm_type == NormType::LayerNorm {
            self.layer_norm(name, size);
        }
    }
}

/// `embeddings.*` and `embeddings_project.*` ([`crate::embeddings::Embeddings::load`]).
fn embeddings(cfg: &RoFormerConfig) -> Vec<ExpectedTensor> {
    let (e, h) = (cfg.embedding_size, cfg.hidden_size);
    let mut b = Block::new(cfg.base_prefix());
    if e != h {
        b.linear("embeddings_project", e, h, true);
    }
    if cfg.position_embedding_type == PositionEmbeddingType::Absolute {
        let positions = [cfg.max_position_embeddings, e];
        b.tensor("embeddings.position_embeddings.weight", &positions);
    }
    b.tensor("embeddings.word_embeddings.weight", &[cfg.vocab_size, e]);
    b.tensor(
        "embeddings.token_type_embeddings.weight",
        &[cfg.type_vocab_size, e],
    );
    b.norm("embeddings.LayerNorm", e, cfg);
    b.tensors
}

/// The encoder's own tensors before its layers ([`crate::encoder::Encoder::load`]): T5's
/// relative bias table `encoder.relative_attention_bias.weight`, `[num_buckets, heads]`, shared
/// by every layer (`t5_relative` positions only).
fn encoder(cfg: &RoFormerConfig) -> Vec<ExpectedTensor> {
    let mut b = Block::new(format!("{}.encoder", cfg.base_prefix()));
    if cfg.position_embedding_type == PositionEmbeddingType::T5Relative {
        b.tensor(
            "relative_attention_bias.weight",
            &[cfg.relative_attention_num_buckets, cfg.num_attention_heads],
        );
    }
    b.tensors
}

/// `encoder.layer.{i}.*` ([`crate::encoder::Layer::load`]).
fn layer(cfg: &RoFormerConfig, i: usize) -> Vec<ExpectedTensor> {
    let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.use_bias);
    let mut b = Block::new(format!("{}.encoder.layer.{i}", cfg.base_prefix()));
    for name in ["query", "key", "value"] {
        b.linear(&format!("attention.self.{name}"), h, h, bias);
    }
    b.linear("attention.output.dense", h, h, bias);
    b.norm("attention.output.LayerNorm", h, cfg);
    b.linear("intermediate.dense", h, inner, bias);
    b.linear("output.dense", inner, h, bias);
    b.norm("output.LayerNorm", h, cfg);
    b.tensors
}

/// The task head's tensors ([`crate::heads`], [`crate::tasks`]).
fn head(cfg: &RoFormerConfig, kind: ModelKind) -> Vec<ExpectedTensor> {
    let (v, e, h, n) = (
        cfg.vocab_size,
        cfg.embedding_size,
        cfg.hidden_size,
        cfg.num_labels,
    );
    match kind {
        ModelKind::Encoder => Vec::new(),
        ModelKind::MaskedLm => {
            let mut b = Block::new("cls.predictions");
            if !cfg.tie_word_embeddings {
                b.tensor("decoder.weight", &[v, e]);
            }
            // A V2 head reads nothing more (and refuses embedding_size != hidden_size).
            if cfg.norm_type == NormType::LayerNorm {
                b.linear("transform.dense", h, e, true);
                b.layer_norm("transform.LayerNorm", e);
                b.tensor("bias", &[v]);
                if let Some(bias) = b.tensors.last_mut() {
                    bias.alias = Some("cls.predictions.decoder.bias".into());
                }
            }
            b.tensors
        }
        ModelKind::SequenceClassification if cfg.base_prefix() == "bert" => {
            let mut b = Block::new("bert");
            b.linear("pooler.dense", h, h, true);
            let mut tensors = b.tensors;
            let mut c = Block::new("classifier");
            c.tensor("weight", &[n, h]);
            c.tensor("bias", &[n]);
            tensors.extend(c.tensors);
            tensors
        }
        ModelKind::SequenceClassification => {
            let mut b = Block::new("classifier");
            b.linear("dense", h, h, true);
            b.linear("out_proj", h, n, true);
            b.tensors
        }
        ModelKind::TokenClassification => {
            let mut b = Block::new("classifier");
            b.tensor("weight", &[n, h]);
            b.tensor("bias", &[n]);
            b.tensors
        }
    }
}

/// Every tensor the build of `kind` for `cfg` reads, in order, for the first `layers` layers:
/// one layer at a time, so a config of ten million layers costs nothing until iterated.
fn tensors_with_layers(
    cfg: &RoFormerConfig,
    kind: ModelKind,
    layers: usize,
) -> impl Iterator<Item = ExpectedTensor> + '_ {
    embeddings(cfg)
        .into_iter()
        .chain(encoder(cfg))
        .chain((0..layers).flat_map(move |i| layer(cfg, i)))
        .chain(head(cfg, kind))
}

/// Every tensor the build of `kind` for `cfg` reads, in the order it asks for them, computed
/// lazily from the config (nothing sized by the config is allocated).
pub fn expected_tensors(
    cfg: &RoFormerConfig,
    kind: ModelKind,
) -> impl Iterator<Item = ExpectedTensor> + '_ {
    tensors_with_layers(cfg, kind, cfg.num_hidden_layers)
}

/// The number of encoder layers `checkpoint` holds: the `i` such that layers `0..i` each have
/// at least one tensor (`encoder.layer.{j}.*` under the encoder prefix `prefix`) and layer `i`
/// has none.
pub fn checkpoint_layers(checkpoint: &Checkpoint, prefix: &str) -> usize {
    let indices: BTreeSet<usize> = checkpoint
        .tensors()
        .keys()
        .filter_map(|name| {
            let bare = if checkpoint.is_prefixed() {
                name.strip_prefix(prefix)?.strip_prefix('.')?
            } else {
                name.as_str()
            };
            let (index, _) = bare.strip_prefix("encoder.layer.")?.split_once('.')?;
            index.parse().ok()
        })
        .collect();
    (0..).find(|i| !indices.contains(i)).unwrap_or(0)
}

/// Every difference between what the build of `kind` for `cfg` would read and what
/// `checkpoint` stores: a layer count above the checkpoint's (one problem, not one per missing
/// tensor), then missing and mis-shaped tensors of the layers the checkpoint has, the embeddings
/// and the head. Empty when the build can read every tensor it asks for.
///
/// Time and memory are bounded by the checkpoint's tensor list whatever the config claims:
/// only layers the checkpoint holds are compared, and shapes are compared as lists of numbers.
pub fn check(cfg: &RoFormerConfig, kind: ModelKind, checkpoint: &Checkpoint) -> Vec<WeightProblem> {
    let stored_layers = checkpoint_layers(checkpoint, cfg.base_prefix());
    let mut problems = Vec::new();
    if cfg.num_hidden_layers > stored_layers {
        problems.push(WeightProblem::LayerCount {
            expected: cfg.num_hidden_layers,
            found: stored_layers,
        });
    }
    let layers = cfg.num_hidden_layers.min(stored_layers);
    for t in tensors_with_layers(cfg, kind, layers) {
        let stored = checkpoint
            .resolve(&t.name)
            .or_else(|| checkpoint.resolve(t.alias.as_deref()?))
            .and_then(|name| checkpoint.tensors().get_key_value(name));
        let Some((stored, found)) = stored else {
            problems.push(WeightProblem::Missing {
                name: t.name,
                expected: t.shape,
            });
            continue;
        };
        if *found != t.shape {
            problems.push(WeightProblem::Shape {
                name: stored.to_string(),
                expected: t.shape,
                found: found.clone(),
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests;
