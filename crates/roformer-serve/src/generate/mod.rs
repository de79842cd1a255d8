//! Text generation with the GGUF LLaMA of `--gguf`, for `/v1/completions` and
//! `/v1/chat/completions`: the model ([`model`]), the bounded front that admits completions
//! ([`runner`]), the scheduler that decodes every running completion together in one forward
//! pass a step ([`scheduler`], one completion's state in [`sequence`]), what the two pass
//! each other ([`job`]), the stop strings
//! ([`stop`]), and what `/info` says of the model ([`describe`]).

pub mod describe;
pub mod job;
pub mod model;
pub mod runner;
pub mod scheduler;
pub mod sequence;
pub mod stop;

pub use describe::ModelCard;
pub use job::{Event, Finish, GenerationLimits, Job};
pub use model::LlamaModel;
pub use runner::Generator;
