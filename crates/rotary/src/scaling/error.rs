//! What can go wrong reading a transformers `config.json`.

/// A `config.json` this crate cannot interpret; every variant names the field, as a dotted path
/// from the top of the file (`rope_scaling.factor`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field the schedule needs is absent or null.
    #[error("config field `{field}` is missing")]
    Missing {
        /// Dotted path of the field.
        field: String,
    },
    /// A field of the wrong type or out of range.
    #[error("config field `{field}`: {problem}")]
    Invalid {
        /// Dotted path of the field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A `rope_type` this crate does not implement.
    #[error("config field `{field}`: unknown rope type {value:?} (known: default, linear, dynamic, yarn, llama3, longrope)")]
    UnknownRopeType {
        /// Dotted path of the field.
        field: String,
        /// The type found.
        value: String,
    },
}

impl ConfigError {
    /// Dotted path of the offending field.
    pub fn field(&self) -> &str {
        match self {
            ConfigError::Missing { field }
            | ConfigError::Invalid { field, .. }
            | ConfigError::UnknownRopeType { field, .. } => field,
        }
    }
}
