//! Writing Hugging Face model directories: `config.json`, `model.safetensors` (with the
//! `{"format": "pt"}` metadata transformers expects), and whatever files a run adds
//! (`vocab.txt`, `tokenizer_config.json`, optimiser and trainer state).
//!
//! A directory is written whole or not at all: the files go to a fresh sibling directory,
//! are flushed to disk, and only then replace the old directory by renames. A failure (a full
//! disk) leaves the previous checkpoint where it was.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use crate::config::{PositionEmbeddingType, RoFormerConfig};
use crate::train::params::Params;
use crate::train::TrainError;

/// The bytes of a safetensors file holding `tensors` (f32 on the CPU; names must be unique)
/// with the metadata `{"format": "pt"}`.
///
/// # Errors
/// [`TrainError::Save`] when the tensors cannot be serialised.
pub fn safetensors_bytes(tensors: &[(String, Tensor)]) -> Result<Vec<u8>, TrainError> {
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let contiguous = tensors
        .iter()
        .map(|(n, t)| Ok((n.as_str(), t.contiguous()?)))
        .collect::<Result<Vec<_>, candle_core::Error>>()
        .map_err(|e| TrainError::Save(e.to_string()))?;
    safetensors::tensor::serialize(contiguous.iter().map(|(n, t)| (*n, t)), Some(metadata))
        .map_err(|e| TrainError::Save(e.to_string()))
}

/// `config.json` for `cfg` saved from the class `architecture`, pretty-printed.
///
/// # Errors
/// [`TrainError::Save`] if serialisation fails.
pub fn config_bytes(cfg: &RoFormerConfig, architecture: &str) -> Result<Vec<u8>, TrainError> {
    let mut text = serde_json::to_string_pretty(&cfg.to_raw(architecture))
        .map_err(|e| TrainError::Save(e.to_string()))?;
    text.push('\n');
    Ok(text.into_bytes())
}

/// transformers' `RoFormerSinusoidalPositionalEmbedding` table `[n, d]` (`d` the head dim),
/// which its RoFormer checkpoints store as `roformer.encoder.embed_positions.weight`:
/// `P[m, i] = sin(m w_i)` and `P[m, d/2 + i] = cos(m w_i)` for `i < d/2`,
/// `w_i = 10000^(-2i/d)`; f64 angles rounded once to f32. We never read it back (the rotation
/// is computed), but writing it makes our checkpoints hold exactly the keys transformers'
/// own do.
///
/// # Errors
/// [`TrainError::Save`] for a table of more than
/// [`MAX_POSITION_TABLE_ENTRIES`](crate::config::MAX_POSITION_TABLE_ENTRIES) entries (a config
/// whose position type was changed after it was validated); candle errors.
pub fn rotary_position_table(n: usize, d: usize) -> Result<Tensor, TrainError> {
    let half = d / 2;
    let entries = n
        .checked_mul(d)
        .filter(|&e| e <= crate::config::MAX_POSITION_TABLE_ENTRIES)
        .ok_or_else(|| {
            TrainError::Save(format!(
                "the rotary position table of {n} x {d} entries exceeds the limit of {}",
                crate::config::MAX_POSITION_TABLE_ENTRIES
            ))
        })?;
    let mut data = vec![0f32; entries];
    for m in 0..n {
        for i in 0..half {
            let angle = m as f64 / 10000f64.powf((2 * i) as f64 / d as f64);
            data[m * d + i] = angle.sin() as f32;
            data[m * d + half + i] = angle.cos() as f32;
        }
    }
    Ok(Tensor::from_vec(data, (n, d), &candle_core::Device::Cpu)?)
}

/// The two files every checkpoint holds: `config.json` and `model.safetensors` with the
/// current values of `params` (and, for a RoFormer with rotary positions, transformers'
/// position table, see [`rotary_position_table`]).
///
/// # Errors
/// As [`safetensors_bytes`] and [`config_bytes`].
pub fn model_files(
    cfg: &RoFormerConfig,
    architecture: &str,
    params: &Params,
) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
    let mut tensors = params.tensors();
    if cfg.position_embedding_type == PositionEmbeddingType::Rotary {
        tensors.push((
            format!("{}.encoder.embed_positions.weight", cfg.base_prefix()),
            rotary_position_table(cfg.max_position_embeddings, cfg.head_dim())?,
        ));
    }
    Ok(vec![
        ("config.json".into(), config_bytes(cfg, architecture)?),
        ("model.safetensors".into(), safetensors_bytes(&tensors)?),
    ])
}

fn io_error(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A sibling of `dir` named `.{name}.{tag}-{pid}`.
fn sibling(dir: &Path, tag: &str) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "checkpoint".into());
    dir.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

/// Writes `files` (name, bytes) as the directory `dir`, replacing what was there only once
/// every file is written and synced.
///
/// # Errors
/// [`TrainError::Io`] naming the path that failed; `dir` is then as it was.
pub fn write_dir_atomically(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), TrainError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    let partial = sibling(dir, "partial");
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(|e| io_error(&partial, e))?;
    }
    let written = (|| {
        fs::create_dir(&partial).map_err(|e| io_error(&partial, e))?;
        for (name, bytes) in files {
            let path = partial.join(name);
            let mut f = fs::File::create(&path).map_err(|e| io_error(&path, e))?;
            f.write_all(bytes).map_err(|e| io_error(&path, e))?;
            f.sync_all().map_err(|e| io_error(&path, e))?;
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    let old = sibling(dir, "old");
    let had_old = dir.exists();
    if had_old {
        fs::rename(dir, &old).map_err(|e| io_error(dir, e))?;
    }
    if let Err(e) = fs::rename(&partial, dir) {
        if had_old {
            let _ = fs::rename(&old, dir);
        }
        return Err(io_error(dir, e));
    }
    if had_old {
        fs::remove_dir_all(&old).map_err(|e| io_error(&old, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn a_failed_write_leaves_the_previous_checkpoint_whole() {
        let root = std::env::temp_dir().join(format!("roformer-atomic-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dir = root.join("checkpoint");
        let good = vec![
            ("a.json".to_string(), b"first".to_vec()),
            ("b.bin".to_string(), vec![1u8; 1000]),
        ];
        write_dir_atomically(&dir, &good).unwrap();
        assert_eq!(read_dir_files(&dir), good);
        // The second file cannot be created (its name is a path into a missing directory):
        // the write fails after the first file, as a full disk would.
        let bad = vec![
            ("a.json".to_string(), b"second".to_vec()),
            ("missing/b.bin".to_string(), vec![2u8; 10]),
        ];
        assert!(matches!(
            write_dir_atomically(&dir, &bad),
            Err(TrainError::Io { .. })
        ));
        assert_eq!(read_dir_files(&dir), good, "the old checkpoint is intact");
        let leftovers: Vec<_> = fs::read_dir(&root).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no partial directory is left behind");
        // A good write replaces it whole.
        let newer = vec![("c.txt".to_string(), b"new".to_vec())];
        write_dir_atomically(&dir, &newer).unwrap();
        assert_eq!(read_dir_files(&dir), newer);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn position_tables_past_the_limit_are_errors_not_aborts() {
        assert!(matches!(
            rotary_position_table(usize::MAX / 2, 64),
            Err(TrainError::Save(_))
        ));
        assert!(matches!(
            rotary_position_table(1 << 30, 64),
            Err(TrainError::Save(_))
        ));
        let table = rotary_position_table(3, 4).unwrap();
        assert_eq!(table.dims(), &[3, 4]);
    }
}
