//! Trainable parameters: a model built on candle `Var`s, from a checkpoint (fine-tuning) or
//! freshly initialised as transformers initialises it.
//!
//! transformers' `_init_weights` for RoFormer and BERT, which `Init` follows:
//! - dense weights and embedding tables: `N(0, initializer_range^2)`;
//! - the word-embedding row of `pad_token_id`: 0;
//! - biases (and the MLM output bias): 0;
//! - norm weights: 1, norm biases: 0.
//!
//! Each random tensor draws from its own stream, keyed by the seed and the tensor's name
//! without the encoder prefix (`roformer.` / `bert.`): models that differ only in their
//! position scheme (an extra position table, another prefix) start from the same values in
//! every tensor they share, and adding a tensor shifts no other.
//!
//! Every tensor is one `Var` named as transformers names it in a head model's state dict
//! (`roformer.encoder.layer.0.attention.self.query.weight`, `cls.predictions.bias`, ...). A
//! tied MLM decoder is the word-embedding `Var` itself, so its gradient is the sum of both
//! uses, as in PyTorch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::config::RoFormerConfig;
use crate::data::split::fnv1a64;
use crate::error::{ModelError, Result, WeightProblem, WeightProblems};
use crate::model::Architecture;
use crate::weights::Checkpoint;

/// The trainable tensors of a model, by name, in the order the model asked for them.
#[derive(Debug, Clone, Default)]
pub struct Params {
    vars: Vec<(String, Var)>,
}

impl Params {
    /// The variables of a model built on `varmap`, sorted by name.
    pub fn from_varmap(varmap: &candle_nn::VarMap) -> Self {
        let data = varmap.data().lock().unwrap_or_else(|p| p.into_inner());
        let mut vars: Vec<(String, Var)> =
            data.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        Self { vars }
    }

    /// The variables with their names.
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// The variable called `name`.
    pub fn get(&self, name: &str) -> Option<&Var> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The number of trainable scalars.
    pub fn element_count(&self) -> usize {
        self.vars.iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Names and current values, for saving.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        self.vars
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
            .collect()
    }
}

/// A model on trainable variables, and what building it found.
#[derive(Debug)]
pub struct Trainable<M> {
    /// The model; its weights are the tensors of `params`.
    pub model: M,
    /// The variables, for the optimiser and for saving.
    pub params: Params,
    /// Tensors the checkpoint lacked (a new task head), freshly initialised; all of them for a
    /// model built without a checkpoint.
    pub initialised: Vec<String>,
    /// Checkpoint tensors the model did not use (e.g. an MLM head when fine-tuning a
    /// classifier), sorted.
    pub unused: Vec<String>,
}

/// How missing tensors are initialised: transformers' rules (module doc) with a seeded
/// generator per tensor, so that a fresh model repeats bit for bit.
struct Init {
    std: f64,
    pad_row: Option<usize>,
    seed: u64,
    encoder_prefix: &'static str,
}

/// The generator of tensor `name`: ChaCha8 keyed by `seed` and the FNV-1a hash of the name
/// without the encoder prefix.
fn tensor_stream(seed: u64, name: &str, encoder_prefix: &str) -> ChaCha8Rng {
    let unprefixed = name
        .strip_prefix(encoder_prefix)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(name);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&fnv1a64(unprefixed.as_bytes()).to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

impl Init {
    /// The initial value of the tensor `name` of shape `dims`.
    fn tensor(&self, name: &str, dims: &[usize], device: &Device) -> Result<Tensor> {
        let n: usize = dims.iter().product();
        let leaf = name.rsplit('.').next().unwrap_or(name);
        let is_norm = name.contains("LayerNorm") || name.contains("layer_norm");
        let values: Vec<f32> = if leaf == "bias" {
            vec![0.0; n]
        } else if is_norm && leaf == "weight" {
            vec![1.0; n]
        } else {
            let normal = Normal::new(0.0, self.std).map_err(|e| ModelError::InvalidConfig {
                field: "initializer_range",
                reason: e.to_string(),
            })?;
            let mut rng = tensor_stream(self.seed, name, self.encoder_prefix);
            let mut v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng) as f32).collect();
            if let (Some(pad), true, [rows, width]) =
                (self.pad_row, name.ends_with("word_embeddings.weight"), dims)
            {
                if pad < *rows {
                    v[pad * width..(pad + 1) * width].fill(0.0);
                }
            }
            v
        };
        Ok(Tensor::from_vec(values, dims, device)?)
    }
}

/// Whether a missing tensor may be initialised when fine-tuning: a task head's (anything
/// outside the encoder scope, and BERT's pooler), never the encoder's.
fn is_head_tensor(name: &str, encoder_prefix: &str) -> bool {
    !name.starts_with(&format!("{encoder_prefix}.")) || name.contains(".pooler.")
}

struct State {
    vars: Vec<(String, Var)>,
    index: BTreeMap<String, usize>,
    init: Init,
    initialised: Vec<String>,
    used: BTreeSet<String>,
    problems: Vec<WeightProblem>,
    error: Option<ModelError>,
}

/// The candle-nn backend that builds a model on `Var`s.
struct TrainableBackend<'a> {
    checkpoint: Option<&'a Checkpoint>,
    encoder_prefix: &'static str,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TrainableBackend<'_> {
    /// The value of a tensor met for the first time: from the checkpoint, or initialised.
    fn first_value(
        &self,
        state: &mut State,
        name: &str,
        expected: &[usize],
        device: &Device,
    ) -> Option<Tensor> {
        let stored = self.checkpoint.and_then(|c| c.resolve(name));
        match (self.checkpoint, stored) {
            (Some(c), Some(stored)) => {
                state.used.insert(stored.to_string());
                let found = &c.tensors()[stored];
                if found != expected {
                    state.problems.push(WeightProblem::Shape {
                        name: stored.to_string(),
                        expected: expected.to_vec(),
                        found: found.clone(),
                    });
                    return None;
                }
                match c.read(stored, DType::F32, device) {
                    Ok(t) => Some(t),
                    Err(problem) => {
                        state.problems.push(problem);
                        None
                    }
                }
            }
            (Some(_), None) if !is_head_tensor(name, self.encoder_prefix) => {
                state.problems.push(WeightProblem::Missing {
                    name: name.to_string(),
                    expected: expected.to_vec(),
                });
                None
            }
            _ => match state.init.tensor(name, expected, device) {
                Ok(t) => {
                    state.initialised.push(name.to_string());
                    Some(t)
                }
                Err(e) => {
                    state.error.get_or_insert(e);
                    None
                }
            },
        }
    }
}

impl SimpleBackend for TrainableBackend<'_> {
    fn get(
        &self,
        shape: Shape,
        name: &str,
        _hints: candle_nn::Init,
        _dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let expected = shape.dims().to_vec();
        let mut state = lock(&self.state);
        if let Some(&i) = state.index.get(name) {
            let var = &state.vars[i].1;
            if var.dims() != expected.as_slice() {
                return Err(candle_core::Error::Msg(format!(
                    "tensor {name} asked for as {expected:?} and as {:?}",
                    var.dims()
                )));
            }
            return Ok(var.as_tensor().clone());
        }
        let Some(value) = self.first_value(&mut state, name, &expected, dev) else {
            // A stand-in so that the build goes on and finds every problem.
            return Tensor::zeros((), DType::F32, dev)?.broadcast_as(shape);
        };
        let var = Var::from_tensor(&value)?;
        let tensor = var.as_tensor().clone();
        let i = state.vars.len();
        state.vars.push((name.to_string(), var));
        state.index.insert(name.to_string(), i);
        Ok(tensor)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        Err(candle_core::Error::CannotFindTensor {
            path: name.to_string(),
        })
    }

    fn contains_tensor(&self, name: &str) -> bool {
        lock(&self.state).index.contains_key(name)
            || self.checkpoint.is_some_and(|c| c.resolve(name).is_some())
    }
}

/// Builds model type `M` for `cfg` on trainable f32 variables on `device`: tensors from
/// `checkpoint` where it has them (any format and prefix [`Checkpoint`] reads), the rest
/// initialised from `seed` as transformers does. Without a checkpoint every tensor is fresh.
///
/// # Errors
/// [`ModelError::FileChanged`] if the checkpoint changed while it was read,
/// [`ModelError::Weights`] listing every mis-shaped or unreadable tensor and every missing
/// encoder tensor (only a task head's may be missing), and `M`'s own errors.
pub fn build_trainable<M: Architecture>(
    cfg: &RoFormerConfig,
    checkpoint: Option<&Checkpoint>,
    seed: u64,
    device: &Device,
) -> Result<Trainable<M>> {
    // The encoder must come from the checkpoint: its shapes are compared before anything is
    // built, so a config claiming sizes the file does not hold allocates nothing (a head may
    // be missing and initialised, so only the encoder is compared here).
    if let Some(c) = checkpoint {
        let problems = crate::shapes::check(cfg, crate::shapes::ModelKind::Encoder, c);
        if !problems.is_empty() {
            return Err(ModelError::Weights {
                path: c.path().to_path_buf(),
                problems: WeightProblems(problems),
            });
        }
    }
    let state = Arc::new(Mutex::new(State {
        vars: Vec::new(),
        index: BTreeMap::new(),
        init: Init {
            std: cfg.initializer_range,
            pad_row: cfg.pad_token_id.map(|p| p as usize),
            seed,
            encoder_prefix: cfg.base_prefix(),
        },
        initialised: Vec::new(),
        used: BTreeSet::new(),
        problems: Vec::new(),
        error: None,
    }));
    let backend = TrainableBackend {
        checkpoint,
        encoder_prefix: cfg.base_prefix(),
        state: Arc::clone(&state),
    };
    let vb = VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone());
    let built = M::load_root(vb, cfg);
    if let Some(c) = checkpoint {
        c.check_unchanged()?;
    }
    let mut state = lock(&state);
    if let Some(e) = state.error.take() {
        return Err(e);
    }
    if !state.problems.is_empty() {
        return Err(ModelError::Weights {
            path: checkpoint
                .map(|c| c.path().to_path_buf())
                .unwrap_or_default(),
            problems: WeightProblems(std::mem::take(&mut state.problems)),
        });
    }
    let model = built?;
    let unused = match checkpoint {
        Some(c) => c
            .tensors()
            .keys()
            .filter(|k| !state.used.contains(*k) && !crate::weights::is_recomputed(k))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    Ok(Trainable {
        model,
        params: Params {
            vars: std::mem::take(&mut state.vars),
        },
        initialised: std::mem::take(&mut state.initialised),
        unused,
    })
}
