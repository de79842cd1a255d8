//! The key/value cache: the rotated keys and the values of every position seen so far.

use candle_core::{DType, Device, Tensor};

use crate::config::LlamaConfig;
use crate::error::{LlamaError, Result};

/// Keys and values of one layer, `[batch, kv_heads, capacity, head_dim]` each, of which the
/// first `len` positions are filled. Appending past the capacity doubles it (one copy).
#[derive(Debug, Clone)]
struct LayerCache {
    keys: Tensor,
    values: Tensor,
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
    device: Device,
}

impl KvCache {
    /// An empty cache for `batch` sequences that reserves `capacity` positions on first use.
    pub fn new(config: &LlamaConfig, batch: usize, capacity: usize, device: &Device) -> KvCache {
        KvCache {
            layers: vec![None; config.layers],
            batch,
            kv_heads: config.kv_heads,
            head_dim: config.head_dim,
            capacity: capacity.max(1),
            len: 0,
            device: device.clone(),
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

    /// Appends `keys` and `values` (`[batch, kv_heads, t, head_dim]`, contiguous) to `layer`
    /// at the current length and returns the keys and values of all `len + t` positions (views
    /// into the cache, no copy). The length itself moves on in [`KvCache::advance`], once every
    /// layer has appended.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        keys: &Tensor,
        values: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let t = keys.dim(2)?;
        let end = self
            .len
            .checked_add(t)
            .ok_or_else(|| LlamaError::Request("cache length overflows".into()))?;
        if end > self.capacity {
            self.capacity = end.max(self.capacity.saturating_mul(2));
            let (len, capacity) = (self.len, self.capacity);
            for cached in self.layers.iter_mut().flatten() {
                *cached = grow(cached, len, capacity)?;
            }
        }
        let shape = (self.batch, self.kv_heads, self.capacity, self.head_dim);
        let slot = match &mut self.layers[layer] {
            Some(slot) => slot,
            empty => empty.insert(LayerCache {
                keys: Tensor::zeros(shape, DType::F32, &self.device)?,
                values: Tensor::zeros(shape, DType::F32, &self.device)?,
            }),
        };
        slot.keys.slice_set(keys, 2, self.len)?;
        slot.values.slice_set(values, 2, self.len)?;
        Ok((slot.keys.narrow(2, 0, end)?, slot.values.narrow(2, 0, end)?))
    }

    /// Moves the length on by `t` positions after a forward pass appended them to every layer.
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }
}

/// A copy of `cached` (whose first `len` positions are filled) with room for `capacity`.
fn grow(cached: &LayerCache, len: usize, capacity: usize) -> Result<LayerCache> {
    let copy = |old: &Tensor| -> Result<Tensor> {
        let (batch, heads, _, head_dim) = old.dims4()?;
        let new = Tensor::zeros((batch, heads, capacity, head_dim), DType::F32, old.device())?;
        if len > 0 {
            new.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
        }
        Ok(new)
    };
    Ok(LayerCache {
        keys: copy(&cached.keys)?,
        values: copy(&cached.values)?,
    })
}
