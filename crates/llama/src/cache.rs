//! The key/value cache: the rotated keys and the values of every position seen so far, in
//! buffers we own, so that a step appends in place and attention reads them as slices.

use candle_core::Device;

use crate::config::LlamaConfig;
use crate::error::{LlamaError, Result};

/// Keys and values of one layer, `[batch, kv_heads, capacity, head_dim]` each (f32,
/// row-major), of which the first `len` positions of every head are filled. Appending past the
/// capacity doubles it (one copy).
#[derive(Debug, Clone)]
struct LayerCache {
    keys: Vec<f32>,
    values: Vec<f32>,
}

/// One layer's cached keys and values as attention reads them, after an append:
/// `keys[((b * kv_heads + g) * capacity + n) * head_dim + i]` is component `i` of the key of
/// sequence `b`, key/value head `g`, position `n` (likewise `values`), for `n` below the
/// cached length plus the appended tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerView<'a> {
    /// `[batch, kv_heads, capacity, head_dim]`.
    pub(crate) keys: &'a [f32],
    /// `[batch, kv_heads, capacity, head_dim]`.
    pub(crate) values: &'a [f32],
    /// Positions reserved per head.
    pub(crate) capacity: usize,
}

/// The cache of every layer for a batch of sequences decoded in step.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<LayerCache>>,
    batch: usize,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache for `batch` sequences that reserves `capacity` positions on first use.
    /// It lives in the CPU's memory whatever the model's device (`_device`).
    pub fn new(config: &LlamaConfig, batch: usize, capacity: usize, _device: &Device) -> KvCache {
        KvCache {
            layers: vec![None; config.layers],
            batch,
            kv_heads: config.kv_heads,
            head_dim: config.head_dim,
            capacity: capacity.max(1),
            len: 0,
        }
    }

    /// Positions cached so far: the offset of the next token.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Forgets every position (the capacity is kept).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Writes `keys` and `values` (`[batch, t, kv_heads, head_dim]`, token-major, as the
    /// projections make them) into `layer` at positions `len..len + t` and returns the layer's
    /// cache for attention. The length itself moves on in [`KvCache::advance`], once every
    /// layer has appended.
    ///
    /// # Errors
    /// [`LlamaError::Request`] when the two inputs are not whole `[batch, t, kv_heads,
    /// head_dim]` tensors of the same `t`, or the length would overflow.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        keys: &[f32],
        values: &[f32],
    ) -> Result<LayerView<'_>> {
        let row = self.batch * self.kv_heads * self.head_dim;
        let t = keys.len().checked_div(row).unwrap_or(0);
        if row == 0 || t * row != keys.len() || values.len() != keys.len() {
            return Err(LlamaError::Request(format!(
                "{} keys and {} values are not whole [{}, t, {}, {}] tensors of one t",
                keys.len(),
                values.len(),
                self.batch,
                self.kv_heads,
                self.head_dim
            )));
        }
        let end = self
            .len
            .checked_add(t)
            .ok_or_else(|| LlamaError::Request("cache length overflows".into()))?;
        if end > self.capacity {
            let capacity = end.max(self.capacity.saturating_mul(2));
            // One head's positions before and after, in values.
            let rows = (self.len * self.head_dim, self.capacity * self.head_dim);
            let grown = capacity * self.head_dim;
            for cached in self.layers.iter_mut().flatten() {
                cached.keys = regrown(&cached.keys, rows, grown);
                cached.values = regrown(&cached.values, rows, grown);
            }
            self.capacity = capacity;
        }
        let size = self.batch * self.kv_heads * self.capacity * self.head_dim;
        let slot = self.layers[layer].get_or_insert_with(|| LayerCache {
            keys: vec![0.0; size],
            values: vec![0.0; size],
        });
        let (d, heads, capacity) = (self.head_dim, self.kv_heads, self.capacity);
        // Source `[b, i, g, :]` to destination `[b, g, len + i, :]`.
        for (r, (k, v)) in keys.chunks_exact(d).zip(values.chunks_exact(d)).enumerate() {
            let (g, bi) = (r % heads, r / heads);
            let (b, i) = (bi / t, bi % t);
            let at = ((b * heads + g) * capacity + self.len + i) * d;
            slot.keys[at..at + d].copy_from_slice(k);
            slot.values[at..at + d].copy_from_slice(v);
        }
        Ok(LayerView {
            keys: &slot.keys,
            values: &slot.values,
            capacity,
        })
    }

    /// Moves the length on by `t` positions after a forward pass appended them to every layer.
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }
}

/// `from` (heads of `old` values each, of which the first `filled` hold positions) copied
/// into heads of `new` values each.
fn regrown(from: &[f32], (filled, old): (usize, usize), new: usize) -> Vec<f32> {
    let mut to = vec![0.0; from.len() / old * new];
    for (src, dst) in from.chunks_exact(old).zip(to.chunks_exact_mut(new)) {
        dst[..filled].copy_from_slice(&src[..filled]);
    }
    to
}
