//! What defines a training run, recorded in `run.json` when it starts and checked by
//! `--resume`: the model config as trained, the vocabulary, what each data input held, and the
//! shape of every parameter. A run resumed on an edited `vocab.txt`, a changed corpus or a
//! checkpoint of another shape is refused, naming what changed.
//!
//! Hashes are FNV-1a (64 bit), written as 16 hex digits: a check against accidents (an edited
//! or replaced file), not against an adversary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use roformer::data::split::fnv1a64;
use roformer::train::classify::Example;
use roformer::train::mlm::CorpusDigest;
use roformer::train::Params;
use roformer::RoFormerConfig;
use serde::{Deserialize, Serialize};

/// The fingerprint of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The fields of the model's `config.json` as trained.
    pub config: BTreeMap<String, serde_json::Value>,
    /// The vocabulary (`vocab.txt` as the checkpoint holds it).
    pub vocab: Digest,
    /// What each data input held, in the order given.
    pub data: Vec<Source>,
    /// Every parameter's shape, by name.
    pub shapes: BTreeMap<String, Vec<usize>>,
}

/// How many items a file held, and a hash of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Tokens, documents or examples.
    pub items: usize,
    /// Their hash, 16 hex digits.
    pub hash: String,
}

/// One data input: its flag and path, and what it held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `--corpus`, `--train` or `--eval`.
    pub flag: String,
    /// The path as given.
    pub path: PathBuf,
    /// What it held (documents or examples).
    pub digest: Digest,
}

fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

impl Fingerprint {
    /// The fingerprint of a model built from `cfg` with `params`, the vocabulary text
    /// `vocab_txt` and the data `data`.
    ///
    /// # Errors
    /// A config that does not serialise.
    pub fn new(
        cfg: &RoFormerConfig,
        params: &Params,
        vocab_txt: &[u8],
        data: Vec<Source>,
    ) -> anyhow::Result<Self> {
        let mut config: BTreeMap<String, serde_json::Value> =
            match serde_json::to_value(cfg.to_raw(""))? {
                serde_json::Value::Object(map) => map.into_iter().collect(),
                other => anyhow::bail!("the config serialises to {other}, not an object"),
            };
        // The head class names the checkpoint is saved as: not a property of the run.
        config.remove("architectures");
        Ok(Self {
            config,
            vocab: Digest {
                items: vocab_txt.iter().filter(|&&b| b == b'\n').count(),
                hash: hex(fnv1a64(vocab_txt)),
            },
            data,
            shapes: params
                .vars()
                .iter()
                .map(|(name, var)| (name.clone(), var.dims().to_vec()))
                .collect(),
        })
    }

    /// The differences from `now`, the fingerprint of the run as it would resume, one line
    /// each (empty when they agree). `checkpoint` names the directory the model comes from.
    pub fn differences(&self, now: &Fingerprint, checkpoint: &std::path::Path) -> Vec<String> {
        let mut lines = Vec::new();
        let keys: std::collections::BTreeSet<&String> =
            self.config.keys().chain(now.config.keys()).collect();
        for key in keys {
            let (was, is) = (self.config.get(key), now.config.get(key));
            if was != is {
                lines.push(format!(
                    "config field {key} ({}): the run's {}, now {}",
                    checkpoint.join("config.json").display(),
                    shown(was),
                    shown(is)
                ));
            }
        }
        if self.vocab != now.vocab {
            lines.push(format!(
                "vocabulary ({}): the run's {} tokens (hash {}), now {} tokens (hash {})",
                checkpoint.join("vocab.txt").display(),
                self.vocab.items,
                self.vocab.hash,
                now.vocab.items,
                now.vocab.hash
            ));
        }
        lines.extend(data_differences(&self.data, &now.data));
        lines.extend(shape_differences(&self.shapes, &now.shapes, checkpoint));
        lines
    }
}

/// A config value for a message (`absent` when missing).
fn shown(value: Option<&serde_json::Value>) -> String {
    value.map_or_else(|| "absent".into(), ToString::to_string)
}

fn data_differences(was: &[Source], now: &[Source]) -> Vec<String> {
    let paths = |s: &[Source]| -> Vec<String> {
        s.iter()
            .map(|s| format!("{} {}", s.flag, s.path.display()))
            .collect()
    };
    if paths(was) != paths(now) {
        return vec![format!(
            "data inputs: the run's {:?}, now {:?}",
            paths(was),
            paths(now)
        )];
    }
    was.iter()
        .zip(now)
        .filter(|(a, b)| a.digest != b.digest)
        .map(|(a, b)| {
            let unit = if a.flag == "--corpus" {
                "documents"
            } else {
                "examples"
            };
            format!(
                "{} {}: the run read {} {unit} (hash {}), now {} {unit} (hash {})",
                a.flag,
                a.path.display(),
                a.digest.items,
                a.digest.hash,
                b.digest.items,
                b.digest.hash
            )
        })
        .collect()
}

/// Most parameters named in a report of shape differences.
const MAX_SHAPES_SHOWN: usize = 5;

fn shape_differences(
    was: &BTreeMap<String, Vec<usize>>,
    now: &BTreeMap<String, Vec<usize>>,
    checkpoint: &std::path::Path,
) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
    let differing: Vec<String> = names
        .into_iter()
        .filter(|n| was.get(*n) != now.get(*n))
        .map(|n| {
            let shape =
                |s: Option<&Vec<usize>>| s.map_or_else(|| "absent".into(), |d| format!("{d:?}"));
            format!("{n} {} -> {}", shape(was.get(n)), shape(now.get(n)))
        })
        .collect();
    if differing.is_empty() {
        return Vec::new();
    }
    let more = differing.len().saturating_sub(MAX_SHAPES_SHOWN);
    vec![format!(
        "parameter shapes ({}): {}{}",
        checkpoint.display(),
        differing[..differing.len().min(MAX_SHAPES_SHOWN)].join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )]
}

/// The data source of a corpus path read by `train mlm`.
pub fn corpus_source(digest: &CorpusDigest) -> Source {
    Source {
        flag: "--corpus".into(),
        path: digest.path.clone(),
        digest: Digest {
            items: digest.documents,
            hash: hex(digest.hash),
        },
    }
}

/// The data source of an example file of `train classify`: its examples as tokenised and
/// labelled (ids, token types and label of each, in order).
pub fn examples_source(flag: &str, path: &std::path::Path, examples: &[Example]) -> Source {
    let mut bytes = Vec::new();
    for e in examples {
        bytes.extend((e.ids.len() as u64).to_le_bytes());
        bytes.extend(e.ids.iter().flat_map(|id| id.to_le_bytes()));
        bytes.extend(e.type_ids.iter().flat_map(|id| id.to_le_bytes()));
        bytes.extend(e.label.to_le_bytes());
    }
    Source {
        flag: flag.into(),
        path: path.to_path_buf(),
        digest: Digest {
            items: examples.len(),
            hash: hex(fnv1a64(&bytes)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print() -> Fingerprint {
        Fingerprint {
            config: [("hidden_size".to_string(), serde_json::json!(64))].into(),
            vocab: Digest {
                items: 100,
                hash: hex(1),
            },
            data: vec![Source {
                flag: "--corpus".into(),
                path: "poems".into(),
                digest: Digest {
                    items: 300,
                    hash: hex(2),
                },
            }],
            shapes: [("w".to_string(), vec![4, 8])].into(),
        }
    }

    #[test]
    fn equal_fingerprints_have_no_difference() {
        assert!(print().differences(&print(), "ckpt".as_ref()).is_empty());
    }

    #[test]
    fn each_change_is_named_with_both_values() {
        let was = print();
        let mut now = print();
        now.config
            .insert("hidden_size".into(), serde_json::json!(128));
        now.vocab.items = 101;
        now.data[0].digest.items = 301;
        now.shapes.insert("w".into(), vec![4, 16]);
        now.shapes.insert("extra".into(), vec![2]);
        let lines = was.differences(&now, "ckpt".as_ref());
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].contains("config field hidden_size") && lines[0].contains("64, now 128"));
        assert!(lines[1].contains("100 tokens") && lines[1].contains("101 tokens"));
        assert!(lines[2].contains("--corpus poems") && lines[2].contains("300 documents"));
        assert!(lines[3].contains("w [4, 8] -> [4, 16]") && lines[3].contains("extra absent"));
    }

    #[test]
    fn the_examples_hash_sees_a_changed_label() {
        let e = |label| Example {
            ids: vec![2, 7, 3],
            type_ids: vec![0, 0, 0],
            label,
        };
        let a = examples_source("--train", "t.jsonl".as_ref(), &[e(0), e(1)]);
        let b = examples_source("--train", "t.jsonl".as_ref(), &[e(0), e(0)]);
        assert_eq!(a.digest.items, 2);
        assert_ne!(a.digest, b.digest);
    }
}
