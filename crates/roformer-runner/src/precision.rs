//! `--precision`: the precision of the matrix products of training and inference.

use clap::ValueEnum;
use roformer::Precision;
use serde::{Deserialize, Serialize};

/// The `--precision` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrecisionArg {
    /// f32 operands (the default, as in PyTorch).
    #[default]
    F32,
    /// bf16 operands with f32 accumulation (as `torch.autocast(dtype=torch.bfloat16)`);
    /// f32 where the CPU has no native bf16 dot product.
    Bf16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        p.asked()
    }
}

impl From<Precision> for PrecisionArg {
    fn from(p: Precision) -> Self {
        match p {
            Precision::F32 => PrecisionArg::F32,
            Precision::Bf16 => PrecisionArg::Bf16,
        }
    }
}

impl PrecisionArg {
    /// The precision asked for.
    fn asked(self) -> Precision {
        match self {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Bf16 => Precision::Bf16,
        }
    }

    /// The flag's value: `f32` or `bf16`.
    pub fn name(self) -> &'static str {
        self.asked().name()
    }

    /// The precision that runs on this CPU: bf16 falls back to f32 where the CPU has no
    /// native bf16 dot product, and says so on stderr (once per process).
    pub fn resolve(self) -> Precision {
        let asked = self.asked();
        let runs = asked.effective();
        if runs != asked {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "--precision bf16: this CPU has no native bf16 dot product (AVX512-BF16); \
                     running in f32"
                );
            });
        }
        runs
    }
}
