//! The error type of the optimisation module.

/// Everything that can go wrong configuring or running an optimiser, a gradient operation or a
/// learning-rate schedule. Bad settings or mismatched tensors end up here, never in a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptimError {
    /// An optimiser or clipping setting outside its domain (e.g. a negative learning rate,
    /// `beta1` outside `[0, 1)`).
    #[error("invalid {field} = {value}: {reason}")]
    InvalidSetting {
        /// The setting (e.g. `beta2`).
        field: &'static str,
        /// The value given.
        value: f64,
        /// What the value must be.
        reason: &'static str,
    },
    /// A learning-rate schedule that cannot be evaluated meaningfully.
    #[error("invalid learning-rate schedule: {0}")]
    InvalidSchedule(String),
    /// The same parameter name, or the same `Var` under a second name (it would be updated
    /// twice), given to an optimiser; holds the second name.
    #[error("parameter {0:?} given twice")]
    DuplicateParameter(String),
    /// A gradient for a name the optimiser does not hold.
    #[error("gradient for unknown parameter {0:?}")]
    UnknownGradient(String),
    /// Two tensors for the same parameter (parameter and gradient, or two gradients) whose
    /// shapes differ.
    #[error("{name}: shape {found:?} does not match {expected:?}")]
    ShapeMismatch {
        /// The parameter.
        name: String,
        /// The parameter's (or first gradient's) shape.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A gradient holding NaN or an infinity.
    #[error("gradient of {0:?} is not finite (NaN or infinity)")]
    NonFinite(String),
    /// A tensor needed to restore an optimiser state is absent.
    #[error("optimiser state: missing {0:?}")]
    MissingState(String),
    /// A state tensor whose name matches no parameter of the optimiser.
    #[error("optimiser state: {0:?} matches no parameter")]
    UnknownState(String),
    /// A state tensor whose shape differs from its parameter's.
    #[error("optimiser state: {name} has shape {found:?}, expected {expected:?}")]
    StateShape {
        /// The state tensor (e.g. `exp_avg.cls.predictions.bias`).
        name: String,
        /// The expected shape.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A state tensor with an impossible value (e.g. a step count that is not a positive integer).
    #[error("optimiser state: {name}: {reason}")]
    InvalidState {
        /// The state tensor.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An error from candle (tensor conversion, device transfer).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The result type of the optimisation module.
pub type Result<T, E = OptimError> = std::result::Result<T, E>;
