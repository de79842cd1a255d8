//! What a classification run of the CLI and of the experiments shares.

use roformer::train::TrainError;

/// A classification run's failure before its first step, with the flags behind it.
pub fn explain(e: TrainError) -> anyhow::Error {
    match e {
        e @ TrainError::TooLarge(_) => anyhow::Error::new(e).context(
            "the run does not fit in memory: lower --batch or --max-length, or use a smaller model",
        ),
        e => e.into(),
    }
}
