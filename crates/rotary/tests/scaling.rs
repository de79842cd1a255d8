//! Context-extension scalings read from config.json, against transformers'
//! modeling_rope_utils (fixtures from scripts/make_scaling_fixtures.py), and the errors for
//! configs that cannot be interpreted.

use rotary::{ConfigError, Layout, RopeSpec, Scaling};
use serde_json::{json, Value};

/// transformers computes in float32 (relative error of `base^(2i/dim)` about
/// `2^-24 * (1 + ln base)` < 2e-6 for bases up to 1e6); we compute in f64.
const REL_TOL: f64 = 1e-5;

fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/scaling/cases.json"
    );
    serde_json::from_str::<Value>(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn rel_err(ours: f64, theirs: f64) -> f64 {
    (ours - theirs).abs() / theirs.abs()
}

#[test]
fn matches_transformers_on_every_fixture() {
    let cases = cases();
    assert!(cases.len() >= 10);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let spec =
            RopeSpec::from_hf_config(&case["config"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        for check in case["checks"].as_array().unwrap() {
            let seq_len = check["seq_len"].as_u64().map(|n| n as usize);
            let freqs = spec.freqs(seq_len).unwrap();
            let expected: Vec<f64> = check["inv_freq"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(freqs.inv_freq.len(), expected.len(), "{name} {seq_len:?}");
            for (i, (&ours, &theirs)) in freqs.inv_freq.iter().zip(&expected).enumerate() {
                let err = rel_err(ours, theirs);
                assert!(
                    err <= REL_TOL,
                    "{name} seq_len {seq_len:?} inv_freq[{i}]: {ours} vs {theirs} (rel {err:e})"
                );
            }
            let att = check["attention_factor"].as_f64().unwrap();
            let err = rel_err(freqs.attention_factor, att);
            assert!(
                err <= REL_TOL,
                "{name}: attention factor {} vs {att}",
                freqs.attention_factor
            );
        }
    }
}

/// The fixtures exercise every scheme and both config forms.
#[test]
fn fixtures_cover_every_scheme() {
    let mut seen = [false; 6];
    for case in cases() {
        let spec = RopeSpec::from_hf_config(&case["config"]).unwrap();
        let k = match spec.scaling {
            Scaling::Default => 0,
            Scaling::Linear { .. } => 1,
            Scaling::Dynamic { .. } => 2,
            Scaling::Yarn(_) => 3,
            Scaling::Llama3(_) => 4,
            Scaling::LongRope(_) => 5,
            _ => unreachable!(),
        };
        seen[k] = true;
    }
    assert_eq!(seen, [true; 6]);
}

/// A scaled schedule enters the kernels as a `Rope` whose amplitude is the attention factor.
#[test]
fn rope_carries_frequencies_and_attention_factor() {
    let config = json!({
        "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 8192,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    });
    let spec = RopeSpec::from_hf_config(&config).unwrap();
    let freqs = spec.freqs(None).unwrap();
    let rope = spec.rope(Layout::Half, None).unwrap();
    assert_eq!(rope.inv_freq(), &freqs.inv_freq[..]);
    assert_eq!(rope.amplitude(), freqs.attention_factor);
    assert_eq!(rope.head_dim(), 64);
    assert!(freqs.attention_factor > 1.0);
}

/// Scalings that are the identity reduce to the default schedule exactly.
#[test]
fn trivial_scalings_are_the_default() {
    let base =
        json!({"hidden_size": 128, "num_attention_heads": 2, "max_position_embeddings": 1024});
    let with = |scaling: Value| {
        let mut c = base.clone();
        c["rope_scaling"] = scaling;
        RopeSpec::from_hf_config(&c)
            .unwrap()
            .freqs(Some(512))
            .unwrap()
    };
    let default = RopeSpec::from_hf_config(&base)
        .unwrap()
        .freqs(None)
        .unwrap();
    assert_eq!(with(json!({"type": "linear", "factor": 1.0})), default);
    // Dynamic below max_position_embeddings keeps the base.
    assert_eq!(with(json!({"type": "dynamic", "factor": 4.0})), default);
}

fn error_of(config: Value) -> ConfigError {
    RopeSpec::from_hf_config(&config).unwrap_err()
}

#[test]
fn uninterpretable_configs_name_the_field() {
    let cases = [
        (json!({"num_attention_heads": 4}), "head_dim"),
        (json!({"hidden_size": 64}), "num_attention_heads"),
        (
            json!({"hidden_size": 65, "num_attention_heads": 4}),
            "hidden_size",
        ),
        (json!({"head_dim": "64"}), "head_dim"),
        (
            json!({"head_dim": 64, "rope_scaling": {"type": "linear"}}),
            "rope_scaling.factor",
        ),
        (
            json!({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": -2}}),
            "rope_scaling.factor",
        ),
        (
            json!({"head_dim": 64, "rope_scaling": {"rope_type": "ntk-by-parts"}}),
            "rope_scaling.rope_type",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {"type": "dynamic", "factor": 2}}),
            "max_position_embeddings",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {"rope_type": "llama3", "factor": 8,
                   "high_freq_factor": 4, "original_max_position_embeddings": 8192}}),
            "rope_parameters.low_freq_factor",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {"rope_type": "llama3", "factor": 8,
                   "low_freq_factor": 4, "high_freq_factor": 1,
                   "original_max_position_embeddings": 8192}}),
            "rope_parameters.high_freq_factor",
        ),
        (
            json!({"head_dim": 8, "max_position_embeddings": 8192,
                   "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1],
                   "long_factor": [1, 2, 3, 4], "original_max_position_embeddings": 4096}}),
            "rope_scaling.short_factor",
        ),
        (
            json!({"head_dim": 8, "rope_scaling": {"type": "yarn", "factor": 2}}),
            "rope_scaling.original_max_position_embeddings",
        ),
        (json!({"head_dim": 64, "rope_theta": "big"}), "rope_theta"),
        (
            json!({"head_dim": 64, "partial_rotary_factor": 1.5}),
            "partial_rotary_factor",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.001}}),
            "rope_parameters.partial_rotary_factor",
        ),
        (
            json!({"head_dim": 64, "rope_scaling": "linear"}),
            "rope_scaling",
        ),
        (
            json!({"head_dim": 64, "rope_parameters": {
                "full_attention": {"rope_type": "default"},
                "sliding_attention": {"rope_type": "linear", "factor": 2}}}),
            "rope_parameters",
        ),
        (json!([1, 2]), "(top level)"),
    ];
    for (config, field) in cases {
        let err = error_of(config.clone());
        assert_eq!(err.field(), field, "{config}: {err}");
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn config_forms_and_precedence() {
    // rope_scaling wins over rope_parameters when non-empty; an empty one is ignored.
    let c = json!({"head_dim": 64, "rope_scaling": {"type": "linear", "factor": 2.0},
                   "rope_parameters": {"rope_type": "linear", "factor": 8.0}});
    assert_eq!(
        RopeSpec::from_hf_config(&c).unwrap().scaling,
        Scaling::Linear { factor: 2.0 }
    );
    let c = json!({"head_dim": 64, "rope_scaling": {},
                   "rope_parameters": {"rope_type": "linear", "factor": 8.0}});
    assert_eq!(
        RopeSpec::from_hf_config(&c).unwrap().scaling,
        Scaling::Linear { factor: 8.0 }
    );
    // The dictionary's rope_theta and partial_rotary_factor override the top level's.
    let c = json!({"head_dim": 64, "rope_theta": 1e4, "partial_rotary_factor": 0.5,
                   "rope_parameters": {"rope_theta": 5e5, "partial_rotary_factor": 0.25}});
    let spec = RopeSpec::from_hf_config(&c).unwrap();
    assert_eq!((spec.base, spec.dim), (5e5, 16));
    // Qwen2-VL's legacy "mrope" type is the default schedule.
    let c =
        json!({"head_dim": 64, "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]}});
    assert_eq!(
        RopeSpec::from_hf_config(&c).unwrap().scaling,
        Scaling::Default
    );
}
