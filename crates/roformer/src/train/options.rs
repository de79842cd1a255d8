//! The settings of a training run as plain values ([`TrainOptions`], with its documented
//! defaults), and what a resume may change of the settings a run recorded ([`Resumable`]).
//!
//! A resume runs with the settings the run recorded. A caller asks for settings of its own
//! (the recorded ones with what it was given laid over them); [`resumed`] takes from them
//! only the fields the type's [`Resumable::MAY_CHANGE`] names, the one list of what a resume
//! may change, and refuses any other difference, naming the field and both values.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cpu::Precision;
use crate::optim::Decay;
use crate::train::classify::ClassifyOptions;
use crate::train::mlm::MlmDataOptions;

/// The optimisation settings of a run, the same for every task (text and images). Each
/// field's default is [`TrainOptions::PRETRAINING`]'s, which `Default` gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainOptions {
    /// Optimisation steps in all (`None`: three passes over the training data). Default: `None`.
    pub steps: Option<u64>,
    /// Micro-batches per step (gradient accumulation), at least 1. Default: 1.
    pub grad_accum: usize,
    /// Peak learning rate. Default: 5e-4 (2e-5 to 5e-5 suit fine-tuning,
    /// [`TrainOptions::FINE_TUNING`]).
    pub lr: f64,
    /// Warm-up steps (linear from 0 to the peak). Default: 0.
    pub warmup: u64,
    /// The decay after the warm-up. Default: linear to 0 at the last step.
    pub decay: Decay,
    /// AdamW's decoupled weight decay (not on biases and norm weights). Default: 0.01.
    pub weight_decay: f64,
    /// Clip the global gradient norm to this (`None`: no clipping). Default: 1.0.
    pub max_grad_norm: Option<f64>,
    /// Seed of the fresh weights and of dropout (a task's data has its own seed). Default: 0.
    pub seed: u64,
    /// Evaluate every this many steps (0: at the end only). Default: 0.
    pub eval_every: u64,
    /// Save a checkpoint every this many steps (0: at the end only). Default: 0.
    pub save_every: u64,
    /// The precision of the training products (`"f32"` or `"bf16"` in JSON). Default: f32.
    #[serde(with = "precision_name")]
    pub precision: Precision,
}

impl TrainOptions {
    /// The defaults of a masked-LM pre-training (`roformer train mlm`).
    pub const PRETRAINING: TrainOptions = TrainOptions {
        steps: None,
        grad_accum: 1,
        lr: 5e-4,
        warmup: 0,
        decay: Decay::Linear,
        weight_decay: 0.01,
        max_grad_norm: Some(1.0),
        seed: 0,
        eval_every: 0,
        save_every: 0,
        precision: Precision::F32,
    };

    /// The defaults of a fine-tuning (`roformer train classify`): [`Self::PRETRAINING`]'s
    /// with a peak learning rate of 5e-5.
    pub const FINE_TUNING: TrainOptions = TrainOptions {
        lr: 5e-5,
        ..Self::PRETRAINING
    };

    /// The defaults of a vision classifier trained from scratch on Fashion-MNIST
    /// (`roformer vision train`): 10,000 steps at a peak of 1e-3 after 500 warm-up steps,
    /// cosine decay, weight decay 0.05, an evaluation and a checkpoint every 500 steps.
    pub const VISION: TrainOptions = TrainOptions {
        steps: Some(10_000),
        lr: 1e-3,
        warmup: 500,
        decay: Decay::Cosine,
        weight_decay: 0.05,
        eval_every: 500,
        save_every: 500,
        ..Self::PRETRAINING
    };
}

impl Default for TrainOptions {
    /// [`TrainOptions::PRETRAINING`].
    fn default() -> Self {
        Self::PRETRAINING
    }
}

/// Settings a run records and a resume compares: a resume keeps every recorded field except
/// those of [`Resumable::MAY_CHANGE`].
pub trait Resumable: Serialize + DeserializeOwned {
    /// The fields a resume may change, by their names in the serialised settings (their Rust
    /// names): the one list of them. Every other field must keep the run's value.
    const MAY_CHANGE: &'static [&'static str];
}

impl Resumable for TrainOptions {
    /// The total steps (not below the steps done; a run with more decays its learning rate
    /// over the new total from there on), the products' precision, and how often the run
    /// saves and evaluates: none of them changes the data or the steps already taken.
    const MAY_CHANGE: &'static [&'static str] = &["steps", "precision", "save_every", "eval_every"];
}

impl Resumable for MlmDataOptions {
    /// None: the corpus and its blocks are the run's.
    const MAY_CHANGE: &'static [&'static str] = &[];
}

impl Resumable for ClassifyOptions {
    /// None: the examples and labels are the run's.
    const MAY_CHANGE: &'static [&'static str] = &[];
}

/// A field that a resume asked to change and may not.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{field} cannot change on resume: the run has {was}, asked for {asked} (a resume may change \
     {})",
    may_change.join(", ")
)]
pub struct ResumeConflict {
    /// The field, by its name in the serialised settings.
    pub field: String,
    /// The run's value.
    pub was: serde_json::Value,
    /// The value asked for.
    pub asked: serde_json::Value,
    /// The fields of these settings that a resume may change ([`Resumable::MAY_CHANGE`]).
    pub may_change: &'static [&'static str],
}

/// The settings a resume of a run that recorded `recorded` runs with, when `asked` is asked
/// for: `recorded`, with the fields of [`Resumable::MAY_CHANGE`] taken from `asked`.
///
/// # Errors
/// [`ResumeConflict`] for the first other field (in serialised order) where `asked` differs
/// from `recorded`; a setting that does not serialise to a JSON object, or does not read back,
/// is reported as a conflict of the field `(settings)`.
pub fn resumed<T: Resumable>(recorded: &T, asked: &T) -> Result<T, ResumeConflict> {
    let malformed = |e: serde_json::Error| ResumeConflict {
        field: "(settings)".into(),
        was: serde_json::Value::Null,
        asked: serde_json::Value::String(e.to_string()),
        may_change: T::MAY_CHANGE,
    };
    let mut merged = serde_json::to_value(recorded).map_err(malformed)?;
    let asked = serde_json::to_value(asked).map_err(malformed)?;
    let (Some(fields), Some(asked_fields)) = (merged.as_object_mut(), asked.as_object()) else {
        return Err(malformed(serde::ser::Error::custom("not a JSON object")));
    };
    for (field, value) in asked_fields {
        let was = fields
            .get(field)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        if T::MAY_CHANGE.contains(&field.as_str()) {
            fields.insert(field.clone(), value.clone());
        } else if was != *value {
            return Err(ResumeConflict {
                field: field.clone(),
                was,
                asked: value.clone(),
                may_change: T::MAY_CHANGE,
            });
        }
    }
    serde_json::from_value(merged).map_err(malformed)
}

/// [`Precision`] in JSON by its flag name, `"f32"` or `"bf16"`.
mod precision_name {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::cpu::Precision;

    /// `"f32"` or `"bf16"`.
    pub(super) fn serialize<S: Serializer>(p: &Precision, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.name())
    }

    /// `"f32"` or `"bf16"`; anything else is an error naming both.
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
        let name = String::deserialize(d)?;
        [Precision::F32, Precision::Bf16]
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| D::Error::custom(format!("precision {name:?}: f32 or bf16")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serialised field names of `value`.
    fn fields(value: &impl Serialize) -> Vec<String> {
        let value = serde_json::to_value(value).unwrap();
        value.as_object().unwrap().keys().cloned().collect()
    }

    #[test]
    fn every_name_a_resume_may_change_is_a_field() {
        // A renamed field fails here, instead of silently leaving the list.
        for (names, fields) in [
            (TrainOptions::MAY_CHANGE, fields(&TrainOptions::default())),
            (
                MlmDataOptions::MAY_CHANGE,
                fields(&MlmDataOptions::default()),
            ),
            (
                ClassifyOptions::MAY_CHANGE,
                fields(&ClassifyOptions::default()),
            ),
        ] {
            for name in names {
                assert!(fields.contains(&name.to_string()), "{name} in {fields:?}");
            }
        }
    }

    #[test]
    fn a_resume_takes_a_changed_field_it_may_change_and_keeps_the_rest() {
        let run = TrainOptions {
            steps: Some(8),
            lr: 2e-3,
            ..TrainOptions::default()
        };
        let asked = TrainOptions {
            steps: Some(16),
            save_every: 2,
            precision: Precision::Bf16,
            ..run.clone()
        };
        let merged = resumed(&run, &asked).unwrap();
        assert_eq!(merged, asked);
        assert_eq!(resumed(&run, &run).unwrap(), run);
    }

    #[test]
    fn a_resume_refuses_another_field_naming_it_and_both_values() {
        let run = TrainOptions {
            lr: 2e-3,
            ..TrainOptions::default()
        };
        let asked = TrainOptions {
            lr: 0.01,
            steps: Some(4),
            ..run.clone()
        };
        let err = resumed(&run, &asked).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.was.as_f64(), err.asked.as_f64()),
            ("lr", Some(2e-3), Some(0.01))
        );
        assert_eq!(
            err.to_string(),
            "lr cannot change on resume: the run has 0.002, asked for 0.01 (a resume may change \
             steps, precision, save_every, eval_every)"
        );
        let data = MlmDataOptions {
            corpus: vec!["poems".into()],
            ..MlmDataOptions::default()
        };
        let other = MlmDataOptions {
            seq_len: 32,
            ..data.clone()
        };
        let err = resumed(&data, &other).unwrap_err();
        assert_eq!(err.field, "seq_len");
    }

    #[test]
    fn options_read_back_as_written_and_a_missing_field_takes_its_default() {
        let options = TrainOptions {
            precision: Precision::Bf16,
            decay: Decay::Cosine,
            max_grad_norm: None,
            ..TrainOptions::FINE_TUNING
        };
        let text = serde_json::to_string(&options).unwrap();
        assert!(
            text.contains("\"precision\":\"bf16\"") && text.contains("\"cosine\""),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<TrainOptions>(&text).unwrap(),
            options
        );
        let old: TrainOptions = serde_json::from_str(r#"{"lr": 0.002}"#).unwrap();
        assert_eq!(
            old,
            TrainOptions {
                lr: 0.002,
                ..TrainOptions::default()
            }
        );
        let err = serde_json::from_str::<TrainOptions>(r#"{"precision": "f16"}"#).unwrap_err();
        assert!(
            err.to_string().contains("precision \"f16\": f32 or bf16"),
            "{err}"
        );
    }
}
