//! The tensors a vision model reads, computed from the config alone, and their comparison with
//! a checkpoint before anything is built: every missing, mis-shaped and unexpected tensor is
//! named in one list.
//!
//! An unexpected tensor is an error here (the text loader only lists unused ones): a DINOv3
//! checkpoint with a bias its config turns off, or more layers than its config, would
//! otherwise load and run wrongly. Two tensors transformers saves and the model does not read
//! are allowed, their shapes checked: `embeddings.mask_token` `[1, 1, hidden]` (masked-image
//! pre-training) and, without registers, the empty `embeddings.register_tokens` `[1, 0,
//! hidden]`.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::WeightProblem;
use crate::vision::config::{MlpKind, PositionKind, VisionConfig};
use crate::vision::model::VisionForImageClassification;
use crate::weights::Checkpoint;

/// Which model is built from a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VisionKind {
    /// [`crate::vision::VisionModel`] (`DINOv3ViTModel`): tensors at the top level, or under
    /// `dinov3_vit.` in a classifier's checkpoint (whose `classifier.*` is then unused).
    Model,
    /// [`VisionForImageClassification`]: the backbone under `dinov3_vit.` and `classifier.*`.
    ImageClassification,
}

/// One tensor: its name as stored and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisionTensor {
    /// The name, with the scope prefix.
    pub name: String,
    /// The shape.
    pub shape: Vec<usize>,
}

/// A list of tensors under one scope.
struct List {
    scope: String,
    tensors: Vec<VisionTensor>,
}

impl List {
    fn new(scope: &str) -> List {
        List {
            scope: scope.to_string(),
            tensors: Vec::new(),
        }
    }

    fn tensor(&mut self, name: &str, shape: &[usize]) {
        self.tensors.push(VisionTensor {
            name: format!("{}{name}", self.scope),
            shape: shape.to_vec(),
        });
    }

    fn linear(&mut self, name: &str, in_dim: usize, out_dim: usize, bias: bool) {
        self.tensor(&format!("{name}.weight"), &[out_dim, in_dim]);
        if bias {
            self.tensor(&format!("{name}.bias"), &[out_dim]);
        }
    }

    fn layer_norm(&mut self, name: &str, size: usize) {
        self.tensor(&format!("{name}.weight"), &[size]);
        self.tensor(&format!("{name}.bias"), &[size]);
    }
}

/// The backbone's scope in a checkpoint of `kind`, with its dot (or empty).
fn base_scope(kind: VisionKind, checkpoint: Option<&Checkpoint>) -> String {
    let prefixed = format!("{}.", VisionForImageClassification::BASE_PREFIX);
    let file_prefixed =
        checkpoint.is_some_and(|c| c.tensors().keys().any(|k| k.starts_with(&prefixed)));
    match kind {
        VisionKind::ImageClassification => prefixed,
        VisionKind::Model if file_prefixed => prefixed,
        VisionKind::Model => String::new(),
    }
}

/// `embeddings.*` ([`crate::vision::embeddings::VisionEmbeddings::load`]).
fn embeddings(cfg: &VisionConfig, list: &mut List) {
    let (h, c, p, r) = (
        cfg.hidden_size,
        cfg.num_channels,
        cfg.patch_size,
        cfg.num_register_tokens,
    );
    list.tensor("embeddings.cls_token", &[1, 1, h]);
    if r > 0 {
        list.tensor("embeddings.register_tokens", &[1, r, h]);
    }
    list.tensor("embeddings.patch_embeddings.weight", &[h, c, p, p]);
    list.tensor("embeddings.patch_embeddings.bias", &[h]);
    if cfg.position == PositionKind::Absolute {
        let n = cfg.config_grid().patches();
        list.tensor("embeddings.position_embeddings", &[1, n, h]);
    }
}

/// `layer.{i}.*` ([`crate::vision::block::VisionLayer::load`]).
fn layer(cfg: &VisionConfig, i: usize, list: &mut List) {
    let (h, inner, b) = (cfg.hidden_size, cfg.intermediate_size, cfg.biases);
    let at = |name: &str| format!("layer.{i}.{name}");
    list.layer_norm(&at("norm1"), h);
    list.linear(&at("attention.q_proj"), h, h, b.query);
    list.linear(&at("attention.k_proj"), h, h, b.key);
    list.linear(&at("attention.v_proj"), h, h, b.value);
    list.linear(&at("attention.o_proj"), h, h, b.proj);
    if cfg.position == PositionKind::RopeMixed {
        let d = cfg.head_dim();
        list.tensor(
            &at("attention.rope_freqs"),
            &[cfg.num_attention_heads, 2, d / 2],
        );
    }
    list.tensor(&at("layer_scale1.lambda1"), &[h]);
    list.layer_norm(&at("norm2"), h);
    if cfg.mlp == MlpKind::Gated {
        list.linear(&at("mlp.gate_proj"), h, inner, b.mlp);
    }
    list.linear(&at("mlp.up_proj"), h, inner, b.mlp);
    list.linear(&at("mlp.down_proj"), inner, h, b.mlp);
    list.tensor(&at("layer_scale2.lambda1"), &[h]);
}

/// Every tensor `kind` reads for `cfg` over its first `layers` layers, the backbone under
/// `scope`.
fn tensors_with_layers(
    cfg: &VisionConfig,
    kind: VisionKind,
    scope: &str,
    layers: usize,
) -> Vec<VisionTensor> {
    let mut list = List::new(scope);
    embeddings(cfg, &mut list);
    for i in 0..layers {
        layer(cfg, i, &mut list);
    }
    list.layer_norm("norm", cfg.hidden_size);
    let mut tensors = list.tensors;
    if kind == VisionKind::ImageClassification {
        let mut head = List::new("");
        head.linear("classifier", 2 * cfg.hidden_size, cfg.num_labels, true);
        tensors.extend(head.tensors);
    }
    tensors
}

/// Every tensor the build of `kind` for `cfg` reads, with the names a checkpoint saved from it
/// holds (the backbone bare for [`VisionKind::Model`], under `dinov3_vit.` with a head).
pub fn expected_tensors(cfg: &VisionConfig, kind: VisionKind) -> Vec<VisionTensor> {
    tensors_with_layers(cfg, kind, &base_scope(kind, None), cfg.num_hidden_layers)
}

/// The tensors transformers saves beside the ones the model reads, which a checkpoint may hold:
/// the mask token, and the empty register table of a model without registers.
pub fn tolerated_tensors(cfg: &VisionConfig, scope: &str) -> Vec<VisionTensor> {
    let mut list = List::new(scope);
    list.tensor("embeddings.mask_token", &[1, 1, cfg.hidden_size]);
    if cfg.num_register_tokens == 0 {
        list.tensor("embeddings.register_tokens", &[1, 0, cfg.hidden_size]);
    }
    list.tensors
}

/// The layers `0..n` of `scope` that the checkpoint holds a tensor of, `n` the first missing.
fn stored_layers(checkpoint: &Checkpoint, scope: &str) -> usize {
    let indices: BTreeSet<usize> = checkpoint
        .tensors()
        .keys()
        .filter_map(|name| {
            let rest = name.strip_prefix(scope)?.strip_prefix("layer.")?;
            rest.split_once('.')?.0.parse().ok()
        })
        .collect();
    (0..).find(|i| !indices.contains(i)).unwrap_or(0)
}

/// The scope of the backbone in `checkpoint` for `kind`, and every difference between what the
/// build reads and what the file stores: a layer count above the file's (once), then missing
/// and mis-shaped tensors, then unexpected ones (any stored tensor of the read scope that is
/// neither read nor tolerated; for [`VisionKind::Model`] in a classifier's file, the head is
/// outside that scope and merely unused). Empty when the build can read every tensor and
/// leaves none behind.
///
/// Time and memory are bounded by the checkpoint's tensor list whatever the config claims:
/// only the layers the file holds are listed.
pub fn check(
    cfg: &VisionConfig,
    kind: VisionKind,
    checkpoint: &Checkpoint,
) -> (String, Vec<WeightProblem>) {
    let scope = base_scope(kind, Some(checkpoint));
    let stored = checkpoint.tensors();
    let mut problems = Vec::new();
    let layers = stored_layers(checkpoint, &scope);
    if cfg.num_hidden_layers > layers {
        problems.push(WeightProblem::LayerCount {
            expected: cfg.num_hidden_layers,
            found: layers,
        });
    }
    let expected = tensors_with_layers(cfg, kind, &scope, cfg.num_hidden_layers.min(layers));
    let tolerated = tolerated_tensors(cfg, &scope);
    for t in &expected {
        match stored.get(&t.name) {
            None => problems.push(WeightProblem::Missing {
                name: t.name.clone(),
                expected: t.shape.clone(),
            }),
            Some(found) if *found != t.shape => problems.push(WeightProblem::Shape {
                name: t.name.clone(),
                expected: t.shape.clone(),
                found: found.clone(),
            }),
            Some(_) => {}
        }
    }
    let known: BTreeMap<&str, &[usize]> = expected
        .iter()
        .chain(&tolerated)
        .map(|t| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    let in_scope = |name: &str| kind == VisionKind::ImageClassification || name.starts_with(&scope);
    for (name, found) in stored.iter().filter(|(n, _)| in_scope(n)) {
        match known.get(name.as_str()) {
            None => problems.push(WeightProblem::Unexpected {
                name: name.clone(),
                found: found.clone(),
            }),
            Some(shape) if tolerated.iter().any(|t| t.name == *name) && *shape != found => problems
                .push(WeightProblem::Shape {
                    name: name.clone(),
                    expected: shape.to_vec(),
                    found: found.clone(),
                }),
            Some(_) => {}
        }
    }
    (scope, problems)
}
