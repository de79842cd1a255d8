//! Reading a [`RopeSpec`] from a transformers `config.json`.
//!
//! The rules follow transformers 5's `RotaryEmbeddingConfigMixin`: the scaling dictionary is
//! `rope_scaling` when it is a non-empty object, else `rope_parameters`; inside it, `rope_type`
//! (or the legacy `type`) picks the scheme and `rope_theta` / `partial_rotary_factor` override
//! the top-level keys of the same name; a top-level `original_max_position_embeddings` wins
//! over the dictionary's (Phi-3), which falls back to `max_position_embeddings`. JSON `null`
//! counts as absent.

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::{Llama3, LongRope, RopeSpec, Scaling, Yarn};
use crate::freqs::MAX_ROTARY_DIM;

impl RopeSpec {
    /// Reads the schedule from a transformers `config.json`: the legacy form (`rope_theta` and
    /// `rope_scaling` with `type` or `rope_type`) or the newer `rope_parameters`, with
    /// `head_dim` or `hidden_size / num_attention_heads`, and `partial_rotary_factor`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the field that is missing, malformed or unknown.
    pub fn from_hf_config(config: &serde_json::Value) -> std::result::Result<Self, ConfigError> {
        parse(config)
    }
}

/// Base used when a config names none (transformers' `default_theta`).
const DEFAULT_THETA: f64 = 10_000.0;

type Result<T> = std::result::Result<T, ConfigError>;

/// One JSON object and its dotted name, for reading typed fields with errors that name them.
#[derive(Clone, Copy)]
struct Section<'a> {
    prefix: &'a str,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Section<'a> {
    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn invalid(&self, key: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            field: self.path(key),
            problem: problem.into(),
        }
    }

    fn missing(&self, key: &str) -> ConfigError {
        ConfigError::Missing {
            field: self.path(key),
        }
    }

    fn value(&self, key: &str) -> Option<&'a Value> {
        self.map?.get(key).filter(|v| !v.is_null())
    }

    fn has(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.invalid(key, format!("expected a number, got {v}"))),
            },
        }
    }

    /// A number that is 0 or more, where transformers reads `value or default` (0 counts as
    /// absent): `None` for null, absent or 0.
    fn non_negative_or_absent(&self, key: &str) -> Result<Option<f64>> {
        match self.f64(key)? {
            Some(x) if x < 0.0 => Err(self.invalid(
                key,
                format!("must be >= 0 (0 or null mean the default), got {x}"),
            )),
            x => Ok(x.filter(|&x| x != 0.0)),
        }
    }

    fn positive(&self, key: &str) -> Result<Option<f64>> {
        match self.f64(key)? {
            Some(x) if x <= 0.0 => Err(self.invalid(key, format!("must be > 0, got {x}"))),
            x => Ok(x),
        }
    }

    fn required_positive(&self, key: &str) -> Result<f64> {
        self.positive(key)?.ok_or_else(|| self.missing(key))
    }

    fn count(&self, key: &str) -> Result<Option<usize>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(self.invalid(key, format!("expected a positive integer, got {v}"))),
            },
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.invalid(key, format!("expected true or false, got {v}"))),
        }
    }

    fn str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.invalid(key, format!("expected a string, got {v}"))),
        }
    }

    /// A list of `len` positive numbers.
    fn factors(&self, key: &str, len: usize) -> Result<Vec<f64>> {
        let v = self.value(key).ok_or_else(|| self.missing(key))?;
        let list = v
            .as_array()
            .ok_or_else(|| self.invalid(key, format!("expected a list of numbers, got {v}")))?;
        if list.len() != len {
            let problem = format!(
                "expected {len} values (one per frequency), got {}",
                list.len()
            );
            return Err(self.invalid(key, problem));
        }
        list.iter()
            .map(|x| match x.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => Ok(f),
                _ => Err(self.invalid(key, format!("expected positive numbers, found {x}"))),
            })
            .collect()
    }
}

/// The scaling dictionary: `rope_scaling` if it is a non-empty object, else `rope_parameters`.
fn scaling_section<'a>(top: &Section<'a>) -> Result<Section<'a>> {
    for key in ["rope_scaling", "rope_parameters"] {
        match top.value(key) {
            None => continue,
            Some(Value::Object(map)) if key == "rope_scaling" && map.is_empty() => continue,
            Some(Value::Object(map)) => {
                let nested = !["rope_type", "type", "rope_theta"]
                    .iter()
                    .any(|k| map.contains_key(*k))
                    && map.values().any(Value::is_object);
                if nested {
                    let problem = "per-layer-type rope parameters are not supported";
                    return Err(top.invalid(key, problem));
                }
                return Ok(Section {
                    prefix: key,
                    map: Some(map),
                });
            }
            Some(v) => return Err(top.invalid(key, format!("expected an object, got {v}"))),
        }
    }
    Ok(Section {
        prefix: "rope_parameters",
        map: None,
    })
}

/// Elements per head: `head_dim`, else `hidden_size / num_attention_heads`; with the field it
/// came from.
fn head_dim(top: &Section<'_>) -> Result<(usize, &'static str)> {
    if let Some(d) = top.count("head_dim")? {
        return Ok((d, "head_dim"));
    }
    let hidden = top
        .count("hidden_size")?
        .ok_or_else(|| top.missing("head_dim"))?;
    let heads = top
        .count("num_attention_heads")?
        .ok_or_else(|| top.missing("num_attention_heads"))?;
    if hidden % heads > 0 {
        let problem = format!("{hidden} is not divisible by num_attention_heads = {heads}");
        return Err(top.invalid("hidden_size", problem));
    }
    Ok((hidden / heads, "hidden_size"))
}

/// The first of `sections` that holds `key`, with the section it came from.
fn first_positive<'a>(sections: &[Section<'a>], key: &str) -> Result<Option<(f64, Section<'a>)>> {
    for s in sections {
        if let Some(x) = s.positive(key)? {
            return Ok(Some((x, *s)));
        }
    }
    Ok(None)
}

fn parse(config: &Value) -> Result<RopeSpec> {
    let top = Section {
        prefix: "",
        map: config.as_object(),
    };
    if top.map.is_none() {
        return Err(top.invalid("(top level)", "expected a JSON object"));
    }
    let params = scaling_section(&top)?;
    let (head_dim, head_dim_field) = head_dim(&top)?;
    let base = first_positive(&[params, top], "rope_theta")?.map_or(DEFAULT_THETA, |(b, _)| b);
    let (partial, partial_at) =
        first_positive(&[params, top], "partial_rotary_factor")?.unwrap_or((1.0, top));
    if partial > 1.0 {
        let problem = format!("must be in (0, 1], got {partial}");
        return Err(partial_at.invalid("partial_rotary_factor", problem));
    }
    // transformers: dim = int(head_dim * partial_rotary_factor).
    let dim = (head_dim as f64 * partial) as usize;
    if dim > MAX_ROTARY_DIM {
        let problem =
            format!("rotates {dim} dims per head, above this crate's limit of {MAX_ROTARY_DIM}");
        return Err(top.invalid(head_dim_field, problem));
    }
    if dim == 0 || 2 * dim.div_ceil(2) > head_dim {
        let problem = format!("rotates {dim} of head_dim = {head_dim} dims: need an even count");
        return Err(partial_at.invalid("partial_rotary_factor", problem));
    }
    let scaling = scaling(&top, &params, dim)?;
    if matches!(scaling, Scaling::Dynamic { .. }) && dim <= 2 {
        let problem = format!("dynamic NTK needs more than 2 rotated dims, got {dim}");
        return Err(partial_at.invalid("partial_rotary_factor", problem));
    }
    Ok(RopeSpec {
        head_dim,
        dim,
        base,
        scaling,
    })
}

/// The scheme named by `rope_type` (or `type`) and its parameters.
fn scaling(top: &Section<'_>, params: &Section<'_>, dim: usize) -> Result<Scaling> {
    let (type_key, rope_type) = match params.str("rope_type")? {
        Some(t) => ("rope_type", t),
        None => ("type", params.str("type")?.unwrap_or("default")),
    };
    let scheme = Scheme {
        top: *top,
        params: *params,
        dim,
        rope_type,
    };
    Ok(match rope_type {
        "default" | "mrope" => Scaling::Default,
        "linear" => Scaling::Linear {
            factor: params.required_positive("factor")?,
        },
        "dynamic" => Scaling::Dynamic {
            factor: params.required_positive("factor")?,
            max_position_embeddings: scheme.max_pos()?,
        },
        "yarn" => scheme.yarn()?,
        "llama3" => scheme.llama3()?,
        "longrope" | "su" => scheme.long_rope()?,
        other => {
            return Err(ConfigError::UnknownRopeType {
                field: params.path(type_key),
                value: other.to_string(),
            })
        }
    })
}

/// One scheme's parameters being read: the config's top level, its `rope_scaling` (or
/// `rope_parameters`) dictionary, the rotated dims and the scheme's name.
struct Scheme<'a> {
    top: Section<'a>,
    params: Section<'a>,
    dim: usize,
    rope_type: &'a str,
}

impl Scheme<'_> {
    fn max_pos(&self) -> Result<f64> {
        self.top.required_positive("max_position_embeddings")
    }

    /// A top-level original_max_position_embeddings wins (Phi-3), then the dictionary's, then
    /// max_position_embeddings.
    fn original_max(&self) -> Result<f64> {
        match first_positive(&[self.top, self.params], "original_max_position_embeddings")? {
            Some((x, _)) => Ok(x),
            None if self.top.has("max_position_embeddings") => self.max_pos(),
            None => Err(self.params.missing("original_max_position_embeddings")),
        }
    }

    /// `factor`, or max_position_embeddings / `original` when it is null.
    fn factor_or_ratio(&self, original: f64) -> Result<f64> {
        match self.params.positive("factor")? {
            Some(f) => Ok(f),
            None if self.top.has("max_position_embeddings") => Ok(self.max_pos()? / original),
            None => Err(self.params.missing("factor")),
        }
    }

    fn even_dim(&self) -> Result<()> {
        if !self.dim.is_multiple_of(2) {
            let problem = format!(
                "{} needs an even rotary dim, got {}",
                self.rope_type, self.dim
            );
            return Err(self.top.invalid("partial_rotary_factor", problem));
        }
        Ok(())
    }

    fn yarn(&self) -> Result<Scaling> {
        self.even_dim()?;
        let params = &self.params;
        let original = self.original_max()?;
        // transformers reads these with `or`: 0 means the default, like null.
        let or_default = |key: &str, default: f64| -> Result<f64> {
            Ok(params.non_negative_or_absent(key)?.unwrap_or(default))
        };
        Ok(Scaling::Yarn(Yarn {
            factor: self.factor_or_ratio(original)?,
            original_max_position_embeddings: original,
            beta_fast: or_default("beta_fast", 32.0)?,
            beta_slow: or_default("beta_slow", 1.0)?,
            // transformers reads `.get("truncate", True)`: an explicit null is false.
            truncate: match params.map.and_then(|m| m.get("truncate")) {
                Some(Value::Null) => false,
                _ => params.bool("truncate")?.unwrap_or(true),
            },
            attention_factor: params.positive("attention_factor")?,
            mscale: params.non_negative_or_absent("mscale")?,
            mscale_all_dim: params.non_negative_or_absent("mscale_all_dim")?,
        }))
    }

    fn llama3(&self) -> Result<Scaling> {
        let params = &self.params;
        let low = params.required_positive("low_freq_factor")?;
        let high = params.required_positive("high_freq_factor")?;
        if high <= low {
            let problem = format!("must exceed low_freq_factor = {low}, got {high}");
            return Err(params.invalid("high_freq_factor", problem));
        }
        Ok(Scaling::Llama3(Llama3 {
            factor: params.required_positive("factor")?,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: self.original_max()?,
        }))
    }

    fn long_rope(&self) -> Result<Scaling> {
        self.even_dim()?;
        let params = &self.params;
        let original = self.original_max()?;
        if original <= 1.0 {
            let problem = format!("must be > 1 for LongRoPE, got {original}");
            return Err(params.invalid("original_max_position_embeddings", problem));
        }
        Ok(Scaling::LongRope(LongRope {
            short_factor: params.factors("short_factor", self.dim / 2)?,
            long_factor: params.factors("long_factor", self.dim / 2)?,
            factor: self.factor_or_ratio(original)?,
            original_max_position_embeddings: original,
            attention_factor: params.positive("attention_factor")?,
        }))
    }
}
