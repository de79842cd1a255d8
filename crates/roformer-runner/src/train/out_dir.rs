//! A run's output directory ([`roformer::train::out_dir`]), with the note a person reads when a
//! resume repaired it.

use roformer::train::out_dir::{prepare_out_dir, OutRequest, RunPaths};

/// Checks, locks and prepares the output directory ([`prepare_out_dir`]), and says on stderr
/// which checkpoint a resume restored from the version a killed save set aside.
///
/// # Errors
/// [`prepare_out_dir`]'s.
pub fn open_out_dir(request: &OutRequest<'_>) -> anyhow::Result<RunPaths> {
    let paths = prepare_out_dir(request)?;
    for (dir, aside) in &paths.restored {
        eprintln!(
            "note: {} was missing (a save was killed between its renames); restored the \
             previous one from {}",
            dir.display(),
            aside.display()
        );
    }
    Ok(paths)
}
