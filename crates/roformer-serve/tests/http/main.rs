//! The server over real HTTP: each test starts it in this process on 127.0.0.1:0 with a small
//! random-weight checkpoint (the round-trip fixtures of the roformer crate; for the image routes
//! the CLI's built-in vision model or a tiny random DINOv3) and talks to it with reqwest. One test binary for all of them.

mod batching;
mod common;
mod completions;
mod images;
mod limits;
mod routes;
mod security;
mod tei;
