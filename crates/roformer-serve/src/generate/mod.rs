//! Text generation with the GGUF LLaMA of `--gguf`, for `/v1/completions` and
//! `/v1/chat/completions`: the model ([`model`]), one generation at a time behind a bounded
//! queue on a blocking thread ([`runner`]), the stop strings ([`stop`]), and what `/info` says
//! of the model ([`describe`]).

pub mod describe;
pub mod model;
pub mod runner;
pub mod stop;

pub use describe::ModelCard;
pub use model::LlamaModel;
pub use runner::{Event, Finish, Generator, Job};
