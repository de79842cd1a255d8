//! The vision model a server may run beside the text model (`--vision`, `--vision-model DIR`):
//! the model and its image processor ([`VisionBackend`]), the body of an image route (raw bytes,
//! [`ImageBody`]) and the queue that runs images on the model ([`ImageQueue`]).

pub mod backend;
pub mod body;
pub mod queue;

pub use backend::VisionBackend;
pub use body::ImageBody;
pub use queue::{ImageQueue, ImageTask};
