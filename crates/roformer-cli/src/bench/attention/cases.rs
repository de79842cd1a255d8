//! The cases: attention layer, masking and length, and their `--case` spec.

use anyhow::{bail, Context};
use roformer::measure::Masking;
use serde::{Deserialize, Serialize};

/// The masking choice of the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum MaskingArg {
    /// Every key visible.
    Bidirectional,
    /// Keys up to the query.
    Causal,
    /// Both, one after the other.
    Both,
}

impl MaskingArg {
    pub(super) fn list(self) -> Vec<Masking> {
        match self {
            MaskingArg::Bidirectional => vec![Masking::Bidirectional],
            MaskingArg::Causal => vec![Masking::Causal],
            MaskingArg::Both => vec![Masking::Bidirectional, Masking::Causal],
        }
    }
}

pub(super) fn masking_name(m: Masking) -> &'static str {
    match m {
        Masking::Bidirectional => "bidirectional",
        Masking::Causal => "causal",
    }
}

/// The two attention layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Kind {
    Softmax,
    Linear,
}

impl Kind {
    pub(super) const ALL: [Kind; 2] = [Kind::Softmax, Kind::Linear];

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Softmax => "softmax",
            Kind::Linear => "linear",
        }
    }
}

/// One case: a layer, a masking and a length.
#[derive(Debug, Clone, Copy)]
pub(super) struct Case {
    pub(super) kind: Kind,
    pub(super) masking: Masking,
    pub(super) len: usize,
}

impl Case {
    pub(super) fn spec(&self) -> String {
        format!(
            "{}:{}:{}",
            self.kind.name(),
            masking_name(self.masking),
            self.len
        )
    }

    pub(super) fn parse(spec: &str) -> anyhow::Result<Case> {
        let parts: Vec<&str> = spec.split(':').collect();
        let [kind, masking, len] = parts[..] else {
            bail!("--case takes KIND:MASKING:LEN, got {spec:?}");
        };
        let kind = match kind {
            "softmax" => Kind::Softmax,
            "linear" => Kind::Linear,
            _ => bail!("unknown attention kind {kind:?}"),
        };
        let masking = match masking {
            "bidirectional" => Masking::Bidirectional,
            "causal" => Masking::Causal,
            _ => bail!("unknown masking {masking:?}"),
        };
        Ok(Case {
            kind,
            masking,
            len: len.parse().context("--case length")?,
        })
    }
}
