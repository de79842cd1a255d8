//! The LLaMA decoder: token embedding, blocks of (RMS norm, attention, RMS norm, SwiGLU) with
//! residual connections, a final RMS norm and the language-model head.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};
use rotary::{convert_projection, Layout, Rope};

use crate::attention::Attention;
use crate::cache::KvCache;
use crate::config::LlamaConfig;
use crate::error::{LlamaError, Result};
use crate::finite::first_out_of_range;
use crate::gguf::{self, GgufFile};
use crate::linear::{Linear, Stacked, Weight};
use crate::q8_0::Q8_0Matrix;

mod ragged;

pub use ragged::Chunk;

/// How to hold the weights and which RoPE pair layout to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Dequantize every weight to f32 at load (exact products, 4-8x the memory) instead of
    /// running candle's quantized kernels.
    pub dequantize: bool,
    /// The RoPE pair layout. GGUF files converted from Hugging Face store the q/k projection
    /// rows permuted for [`Layout::Interleaved`] (llama.cpp's layout), which runs them as
    /// stored. [`Layout::Half`] (Hugging Face's) first undoes that permutation with
    /// [`convert_projection`]; both give the same logits.
    pub layout: Layout,
    /// Where the weights live and the model runs.
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            dequantize: false,
            layout: Layout::Interleaved,
            device: Device::Cpu,
        }
    }
}

/// Which positions to compute logits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Every position: `[batch, t, vocab]`.
    All,
    /// The last position only (what sampling needs): `[batch, vocab]`.
    Last,
}

/// The token embedding, quantized or dense.
#[derive(Debug, Clone)]
enum Embedding {
    /// Rows of a ggml block table, dequantized by candle as they are looked up.
    Quantized(Arc<QTensor>),
    /// The rows of a Q8_0 head tied to the embedding, read from the head's own layout (so the
    /// table is held once), dequantized as they are looked up.
    TiedQ8_0(Arc<Q8_0Matrix>),
    /// Rows dequantized to f32 at load.
    Dense(Tensor),
}

/// RMS norm: `y = x / sqrt(mean(x^2) + eps) * weight` over the last dimension.
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm(x, &self.weight, self.eps)?)
    }
}

/// SwiGLU: `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
struct FeedForward {
    /// The gate and up projections (one product when they stack).
    gate_up: Stacked<2>,
    down: Linear,
}

impl FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [gate, up] = self.gate_up.forward(x)?;
        let gated = (gate.silu()? * up)?;
        self.down.forward(&gated)
    }
}

/// One decoder block: `h = x + attn(norm1(x))`, `y = h + ffn(norm2(h))`.
#[derive(Debug, Clone)]
struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    ffn_norm: RmsNorm,
    ffn: FeedForward,
}

/// A LLaMA decoder with RoPE through [`rotary::Rope`].
#[derive(Debug)]
pub struct Llama {
    config: LlamaConfig,
    embedding: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    head: Linear,
    rope: Rope,
    device: Device,
}

impl Llama {
    /// Builds the model from a GGUF file: reads the configuration, checks every tensor's shape
    /// against it, and copies the weights out of the file.
    ///
    /// # Errors
    /// The errors of [`LlamaConfig::from_gguf`]; [`LlamaError::BadValue`] when
    /// `llama.block_count` is not the number of blocks whose tensors the file holds;
    /// [`LlamaError::MissingTensor`] and [`LlamaError::TensorShape`] for weights that do not
    /// fit the configuration; the errors of [`GgufFile::tensor_bytes`] (a NaN or infinite
    /// weight or block scale, a file changed while it is read).
    pub fn load(file: &GgufFile, options: &LoadOptions) -> Result<Llama> {
        let config = LlamaConfig::from_gguf(file)?;
        check_block_count(file, config.layers)?;
        let loader = Loader {
            file,
            options,
            config: &config,
        };
        let (h, f) = (config.hidden, config.intermediate);
        let kv_width = config.kv_heads * config.head_dim;
        let embedding_q = Arc::new(loader.qtensor("token_embd.weight", &[config.vocab_size, h])?);
        let mut blocks = Vec::with_capacity(config.layers);
        for layer in 0..config.layers {
            let name = |part: &str| format!("blk.{layer}.{part}.weight");
            blocks.push(Block {
                attn_norm: loader.norm(&name("attn_norm"))?,
                attn: Attention {
                    qkv: Stacked::new([
                        loader.projection(&name("attn_q"), config.heads, h)?,
                        loader.projection(&name("attn_k"), config.kv_heads, h)?,
                        loader.linear(&name("attn_v"), &[kv_width, h])?,
                    ]),
                    o: loader.linear(&name("attn_output"), &[h, h])?,
                    heads: config.heads,
                    kv_heads: config.kv_heads,
                    head_dim: config.head_dim,
                },
                ffn_norm: loader.norm(&name("ffn_norm"))?,
                ffn: FeedForward {
                    gate_up: Stacked::new([
                        loader.linear(&name("ffn_gate"), &[f, h])?,
                        loader.linear(&name("ffn_up"), &[f, h])?,
                    ]),
                    down: loader.linear(&name("ffn_down"), &[h, f])?,
                },
            });
        }
        let norm = loader.norm("output_norm.weight")?;
        // Without `output.weight` the head is tied to the embedding.
        let tied = !file.tensors().contains_key("output.weight");
        let head = if tied {
            loader.wrap("token_embd.weight", Arc::clone(&embedding_q))?
        } else {
            loader.linear("output.weight", &[config.vocab_size, h])?
        };
        let embedding = match head.weight() {
            _ if options.dequantize => Embedding::Dense(embedding_q.dequantize(&options.device)?),
            Weight::Q8_0(rows) if tied => Embedding::TiedQ8_0(Arc::clone(rows)),
            _ => Embedding::Quantized(embedding_q),
        };
        let rope = Rope::new(
            config.head_dim,
            config.rotary_dim,
            config.rope_base,
            options.layout,
        )?;
        Ok(Llama {
            config,
            embedding,
            blocks,
            norm,
            head,
            rope,
            device: options.device.clone(),
        })
    }

    /// The configuration read from the file.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The rotary embedding every attention layer applies.
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty cache for `batch` sequences, reserving `capacity` positions.
    pub fn cache(&self, batch: usize, capacity: usize) -> KvCache {
        KvCache::new(&self.config, batch, capacity, &self.device)
    }

    /// Runs `ids` (`[batch, t]` u32, the tokens after the `cache.len()` cached ones, at
    /// positions `cache.len()..cache.len() + t`) and returns logits for `which` positions.
    ///
    /// Every logit is checked finite, so no caller samples from or writes a NaN.
    ///
    /// # Errors
    /// [`LlamaError::TokenId`] for an id outside the vocabulary, [`LlamaError::Request`] for an
    /// empty input or a batch that is not the cache's, [`LlamaError::Activation`] for an input
    /// a quantized product cannot take, [`LlamaError::NonFiniteLogit`] for a NaN or infinite
    /// logit; candle errors otherwise.
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache, which: Logits) -> Result<Tensor> {
        let (batch, t) = ids.dims2()?;
        if t == 0 {
            return Err(LlamaError::Request("no tokens to run".into()));
        }
        if batch != cache.batch() {
            return Err(LlamaError::Request(format!(
                "{batch} sequences given to a cache of {}",
                cache.batch()
            )));
        }
        self.check_ids(&ids.flatten_all()?.to_vec1::<u32>()?)?;
        let x = self.embed(ids)?;
        let x = self.blocks(x, |attn, h, layer| {
            attn.forward(h, &self.rope, cache, layer)
        })?;
        cache.advance(t);
        let (x, positions) = match which {
            Logits::All => (x, t),
            Logits::Last => (x.narrow(1, t - 1, 1)?.squeeze(1)?, 1),
        };
        let logits = self.head.forward(&self.norm.forward(&x)?)?;
        if let Some((index, value)) = first_out_of_range(&logits, f32::MAX)? {
            let vocab = self.config.vocab_size;
            return Err(LlamaError::NonFiniteLogit {
                sequence: index / vocab / positions,
                position: index / vocab % positions,
                token: index % vocab,
                value,
            });
        }
        Ok(logits)
    }

    /// Refuses an id outside the vocabulary.
    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            Some(&id) => Err(LlamaError::TokenId {
                id,
                vocab_size: self.config.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// The embeddings of `ids` (`[batch, t]`, checked): `[batch, t, hidden]`.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let (batch, t) = ids.dims2()?;
        Ok(match &self.embedding {
            Embedding::Quantized(q) => q.embedding(ids)?,
            Embedding::TiedQ8_0(rows) => {
                let ids = ids.flatten_all()?.to_vec1::<u32>()?;
                let hidden = self.config.hidden;
                let mut x = vec![0f32; ids.len() * hidden];
                for (&id, row) in ids.iter().zip(x.chunks_exact_mut(hidden)) {
                    rows.dequantize_row(id as usize, row)?;
                }
                Tensor::from_vec(x, (batch, t, hidden), &self.device)?
            }
            Embedding::Dense(w) => {
                w.index_select(&ids.flatten_all()?, 0)?
                    .reshape((batch, t, self.config.hidden))?
            }
        })
    }

    /// Runs `x` (`[batch, t, hidden]`) through every block, `attend(attention, normed, layer)`
    /// computing each block's attention: `h = x + attn(norm1(x))`, `y = h + ffn(norm2(h))`.
    fn blocks(
        &self,
        mut x: Tensor,
        mut attend: impl FnMut(&Attention, &Tensor, usize) -> Result<Tensor>,
    ) -> Result<Tensor> {
        for (layer, block) in self.blocks.iter().enumerate() {
            let attended = attend(&block.attn, &block.attn_norm.forward(&x)?, layer)?;
            x = (x + attended)?;
            x = (&x + block.ffn.forward(&block.ffn_norm.forward(&x)?)?)?;
        }
        Ok(x)
    }
}

/// Reads tensors of one file with one set of options, checking shapes against the config.
struct Loader<'a> {
    file: &'a GgufFile,
    options: &'a LoadOptions,
    config: &'a LlamaConfig,
}

impl Loader<'_> {
    /// The directory entry of `name`, checked to have `shape`.
    fn info(&self, name: &str, shape: &[usize]) -> Result<&gguf::TensorInfo> {
        let info = self.file.tensor_info(name)?;
        if info.shape != shape {
            return Err(LlamaError::TensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                got: info.shape.clone(),
            });
        }
        Ok(info)
    }

    fn qtensor(&self, name: &str, shape: &[usize]) -> Result<QTensor> {
        let info = self.info(name, shape)?;
        gguf::qtensor(info, &self.file.tensor_bytes(info)?, &self.options.device)
    }

    /// A norm weight of the model's width, as f32.
    fn norm(&self, name: &str) -> Result<RmsNorm> {
        let weight = self
            .qtensor(name, &[self.config.hidden])?
            .dequantize(&self.options.device)?;
        Ok(RmsNorm {
            weight,
            eps: self.config.rms_eps as f32,
        })
    }

    /// A projection of `shape` `[out, in]`.
    fn linear(&self, name: &str, shape: &[usize]) -> Result<Linear> {
        self.wrap(name, Arc::new(self.qtensor(name, shape)?))
    }

    /// A query or key projection of `heads` heads, its rows permuted from the file's
    /// interleaved pairs to the half layout when the options ask for it. Rows are permuted as
    /// raw bytes (each row is a whole number of blocks), so this works for every ggml type.
    fn projection(&self, name: &str, heads: usize, input: usize) -> Result<Linear> {
        let c = self.config;
        let info = self.info(name, &[heads * c.head_dim, input])?;
        let stored = self.file.tensor_bytes(info)?;
        let tensor = match self.options.layout {
            Layout::Interleaved => gguf::qtensor(info, &stored, &self.options.device)?,
            Layout::Half => {
                let rows = convert_projection(
                    &stored,
                    info.row_bytes(),
                    heads,
                    c.head_dim,
                    c.rotary_dim,
                    Layout::Interleaved,
                    Layout::Half,
                )?;
                gguf::qtensor(info, &rows, &self.options.device)?
            }
        };
        self.wrap(name, Arc::new(tensor))
    }

    /// A linear layer over a loaded tensor, dequantized when the options ask for it, and also
    /// when its rows hold an odd number of 32-value blocks: candle's quantized dot products for
    /// those types assert an even count (in builds with debug assertions). Q4_1 and Q8_0 weights
    /// on the CPU go to our kernels ([`Weight::Q4_1`], [`Weight::Q8_0`]), the other quantized
    /// ones to candle's.
    fn wrap(&self, name: &str, tensor: Arc<QTensor>) -> Result<Linear> {
        let block = tensor.dtype().block_size();
        let cols = tensor.shape().dims().last().copied().unwrap_or(0);
        let odd_blocks = block == 32 && (cols / block) % 2 == 1;
        let weight = if self.options.dequantize || odd_blocks {
            Weight::Dense(tensor.dequantize(&self.options.device)?)
        } else if tensor.dtype() == GgmlDType::Q4_1 && self.options.device.is_cpu() {
            // Our SIMD kernel: the same bits as candle's scalar Q4_1 product, faster.
            Weight::Q4_1(Arc::new(crate::q4_1::Q4_1Matrix::from_qtensor(&tensor)?))
        } else if tensor.dtype() == GgmlDType::Q8_0 && self.options.device.is_cpu() {
            // Our SIMD kernel: the same bits as candle's `vec_dot_q8_0_q8_0`, several rows and
            // output features per pass (the tied head of SmolLM2 is Q8_0).
            Weight::Q8_0(Arc::new(crate::q8_0::Q8_0Matrix::from_qtensor(&tensor)?))
        } else {
            Weight::Quantized(QMatMul::from_arc(tensor)?)
        };
        Ok(Linear::new(name, weight))
    }
}

/// Refuses a file whose `llama.block_count` is not the number of blocks its tensors describe
/// (`blk.N.*` for N in `0..count`): a count below would silently drop blocks, one above would
/// only fail later on a missing tensor.
///
/// # Errors
/// [`LlamaError::BadValue`] for `llama.block_count`, naming both numbers.
fn check_block_count(file: &GgufFile, layers: usize) -> Result<()> {
    let blocks = file
        .tensors()
        .keys()
        .filter_map(|name| {
            name.strip_prefix("blk.")?
                .split_once('.')?
                .0
                .parse::<usize>()
                .ok()
        })
        .max()
        .map_or(0, |last| last + 1);
    if blocks != layers {
        return Err(LlamaError::BadValue {
            key: "llama.block_count".into(),
            what: format!(
                "{layers} blocks, but the file holds tensors of {blocks} blocks (`blk.N.*` \
                 for N below {blocks}); the count must equal the number of blocks stored"
            ),
        });
    }
    Ok(())
}
