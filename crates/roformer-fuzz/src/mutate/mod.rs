//! Mutators: format-blind ([`bytes`]) and aware of JSON ([`json`]), safetensors headers
//! ([`safetensors`]) and `torch.save` archives ([`pickle`]).

pub mod bytes;
pub mod json;
pub mod pickle;
pub mod safetensors;
