//! Running targets out of process: the worker ([`worker`]) and the fuzzer's side of it
//! ([`supervisor`]), their pipe protocol, panic capture, findings and the fuzzing loop.

pub mod campaign;
pub mod findings;
mod panics;
pub mod protocol;
pub mod supervisor;
pub mod worker;
