//! AdamW and the linear warm-up schedule against `torch.optim.AdamW` driven by transformers'
//! `get_linear_schedule_with_warmup` (fixture written by `scripts/make_optim_fixtures.py`).

use std::path::Path;

use candle_core::{Device, Var};

use super::flat;
use crate::optim::{AdamW, AdamWConfig, Decay, Gradients, LrSchedule};

const DECAYED: &str = "roformer.encoder.layer.0.attention.self.query.weight";
const NOT_DECAYED: &str = "roformer.embeddings.LayerNorm.weight";

#[test]
fn five_steps_match_torch_adamw_with_linear_warmup() -> crate::optim::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/optim/adamw.safetensors");
    let fx = candle_core::safetensors::load(path, &Device::Cpu)?;
    let get = |name: String| {
        fx.get(&name)
            .unwrap_or_else(|| panic!("fixture lacks {name}"))
    };

    let params: Vec<(String, Var)> = [DECAYED, NOT_DECAYED]
        .iter()
        .map(|n| Ok((n.to_string(), Var::from_tensor(get(format!("init.{n}")))?)))
        .collect::<candle_core::Result<_>>()?;
    let config = AdamWConfig {
        lr: 1e-2,
        weight_decay: 0.1,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(params.clone(), config)?;
    assert_eq!(
        (opt.is_decayed(DECAYED), opt.is_decayed(NOT_DECAYED)),
        (Some(true), Some(false))
    );
    let schedule = LrSchedule::new(1e-2, 2, 6, Decay::Linear)?;
    let torch_lrs = get("lr".into()).to_vec1::<f64>()?;

    for (k, torch_lr) in torch_lrs.iter().enumerate() {
        let lr = schedule.lr_at(opt.steps());
        assert!(
            (lr - torch_lr).abs() <= 1e-15,
            "step {k}: lr {lr} vs torch {torch_lr}"
        );
        let grads = Gradients::from_tensors(
            [DECAYED, NOT_DECAYED].map(|n| (n, get(format!("grad.{k}.{n}")))),
        )?;
        opt.step(&grads, lr)?;
        for (name, var) in &params {
            let want = flat(get(format!("after.{k}.{name}")));
            for (got, want) in flat(var).iter().zip(want) {
                // 1e-6 relative (parameters are of magnitude 0.06 to 3; torch's lerp for `m`
                // rounds differently from β1·m + (1 − β1)·g, by an ulp or so).
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs(),
                    "{name} step {k}: {got} vs {want}"
                );
            }
        }
    }
    assert_eq!(opt.steps(), 5);
    Ok(())
}
