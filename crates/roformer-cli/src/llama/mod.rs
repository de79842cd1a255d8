//! `roformer llama ...`: a pretrained LLaMA (SmolLM2-135M by default) read from a GGUF file,
//! with RoPE through the rotary core.

mod generate;
mod logits;

use std::path::{Path, PathBuf};

use anyhow::Context;
use llama::gguf::GgufFile;
use llama::{Llama, LlamaError, LoadOptions};
use rotary::Layout;

/// Where `scripts/fetch_smollm2.sh` puts the model.
pub const DEFAULT_GGUF: &str = "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Which LLaMA command to run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Continue a prompt (greedy by default), streaming the text; tokens/s on stderr.
    Generate(generate::Args),
    /// Run token ids and write the logits of every position as safetensors.
    Logits(logits::Args),
}

/// Runs the chosen command.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Generate(a) => generate::run(a),
        Command::Logits(a) => logits::run(a),
    }
}

/// The RoPE pair layout to run, on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LayoutArg {
    /// Pairs (x_2i, x_2i+1): the GGUF q/k weights as stored (llama.cpp).
    Interleaved,
    /// Pairs (x_i, x_i+d/2): the q/k weights un-permuted first (Hugging Face).
    Half,
}

impl From<LayoutArg> for Layout {
    fn from(arg: LayoutArg) -> Layout {
        match arg {
            LayoutArg::Interleaved => Layout::Interleaved,
            LayoutArg::Half => Layout::Half,
        }
    }
}

/// The options every LLaMA command takes to load its model.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// The GGUF file (LLaMA architecture). `scripts/fetch_smollm2.sh` fetches the default.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_GGUF)]
    pub gguf: PathBuf,
    /// Dequantize every weight to f32 at load (exact f32 products; the default runs candle's
    /// quantized kernels on the stored blocks).
    #[arg(long)]
    pub dequantize: bool,
    /// RoPE pair layout; both give the same logits.
    #[arg(long, value_enum, default_value = "interleaved")]
    pub layout: LayoutArg,
}

impl ModelArgs {
    /// Opens the file and builds the model.
    pub fn open(&self) -> anyhow::Result<(GgufFile, Llama)> {
        let file = open_gguf(&self.gguf)?;
        let options = LoadOptions {
            dequantize: self.dequantize,
            layout: self.layout.into(),
            ..LoadOptions::default()
        };
        let model = Llama::load(&file, &options)
            .with_context(|| format!("building the model from {}", self.gguf.display()))?;
        Ok((file, model))
    }
}

/// Parses a GGUF file, pointing at the fetch script when the default file is missing.
pub fn open_gguf(path: &Path) -> anyhow::Result<GgufFile> {
    if path == Path::new(DEFAULT_GGUF) && !path.exists() {
        anyhow::bail!(
            "{} does not exist: run scripts/fetch_smollm2.sh from the repository root first, or \
             give --gguf FILE",
            path.display()
        );
    }
    match GgufFile::open(path) {
        Ok(file) => Ok(file),
        // These name the file themselves.
        Err(e @ (LlamaError::Io { .. } | LlamaError::FileChanged { .. })) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
}
