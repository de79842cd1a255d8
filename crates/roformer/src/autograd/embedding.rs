//! The word and token-type lookups and their sum as one op.
//!
//! ```text
//! forward   e_n = W[id_n] + T[type_n]                       (W: [vocab, e], T: [types, e])
//! backward  dW[v] = sum_{n: id_n = v} g_n,  dT[u] = sum_{n: type_n = u} g_n
//! ```
//!
//! candle's lookup (`index_select`) pays in its backward for a zero table, a copy of it
//! (`index_add` adds into a copy) and the accumulation into a second zero table; here each
//! gradient table is zeroed once and the rows of `g` are added into it, on the threads by
//! blocks of columns (every block in token order: the same sums on any thread count).

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor, D};
use candle_nn::{Embedding, Module};
use rayon::prelude::*;

use crate::cpu::policy::SCATTER_COLUMNS;
use crate::cpu::tensor::{f32_slice, tensor, with_f32};
use crate::cpu::SharedOut;

/// `word[ids] + types[type_ids]`, shaped `[b, t, e]` for `ids` of `b * t` tokens (row-major);
/// `type_ids` `None` means type 0 everywhere. CPU f32 tables.
///
/// # Errors
/// An id or type id past its table, a token count that is not `b * t`; candle errors.
pub(crate) fn embed(
    word: &Tensor,
    types: &Tensor,
    ids: Vec<u32>,
    type_ids: Option<Vec<u32>>,
    (b, t): (usize, usize),
) -> candle_core::Result<Tensor> {
    let (vocab, e) = word.dims2()?;
    let (type_vocab, e2) = types.dims2()?;
    if e != e2 || ids.len() != b * t || type_ids.as_ref().is_some_and(|x| x.len() != b * t) {
        return Err(candle_core::Error::Msg(
            "embedding: tables or ids of mismatched sizes".into(),
        ));
    }
    if let Some(&id) = ids.iter().find(|&&i| i as usize >= vocab) {
        return Err(candle_core::Error::Msg(format!(
            "embedding: id {id} past a table of {vocab}"
        )));
    }
    let type_ids = type_ids.unwrap_or_else(|| vec![0; b * t]);
    if let Some(&id) = type_ids.iter().find(|&&i| i as usize >= type_vocab) {
        return Err(candle_core::Error::Msg(format!(
            "embedding: type id {id} past a table of {type_vocab}"
        )));
    }
    word.contiguous()?.apply_op2(
        &types.contiguous()?,
        EmbeddingOp {
            ids,
            type_ids,
            shape: Shape::from((b, t, e)),
        },
    )
}

/// [`embed`] of candle ops on any device and dtype: `word[input_ids] + types[token_type_ids]`
/// (`[b, t]` ids; `None` adds row 0 of `types` to every token), `[b, t, e]`.
///
/// # Errors
/// An id past its table; candle errors.
pub(crate) fn embed_slow(
    word: &Embedding,
    types: &Embedding,
    input_ids: &Tensor,
    token_type_ids: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let words = word.forward(input_ids)?;
    let types = match token_type_ids {
        Some(t) => types.forward(t)?,
        None => {
            let table = types.embeddings();
            let e = table.dim(D::Minus1)?;
            table.narrow(0, 0, 1)?.reshape((1, 1, e))?
        }
    };
    words.broadcast_add(&types)
}

struct EmbeddingOp {
    ids: Vec<u32>,
    type_ids: Vec<u32>,
    shape: Shape,
}

/// `dtable[ids[n]] += g[n]` for every token `n`, into a zeroed `[rows, width]` table.
fn scatter(g: &[f32], ids: &[u32], rows: usize, width: usize) -> Vec<f32> {
    let mut table = vec![0f32; rows * width];
    let out = SharedOut::new(&mut table);
    (0..width.div_ceil(SCATTER_COLUMNS))
        .into_par_iter()
        .for_each(|block| {
            let c0 = block * SCATTER_COLUMNS;
            let cols = SCATTER_COLUMNS.min(width - c0);
            for (n, &id) in ids.iter().enumerate() {
                // SAFETY: this task alone writes columns c0..c0 + cols (of any row), inside
                // the table: ids were checked against `rows`.
                let dst = unsafe { out.slice(id as usize * width + c0, cols) };
                let src = &g[n * width + c0..n * width + c0 + cols];
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
            }
        });
    table
}

impl CustomOp2 for EmbeddingOp {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let word = f32_slice(s1, l1, "embedding table")?;
        let types = f32_slice(s2, l2, "token type table")?;
        let e = l1.shape().dims2()?.1.max(1);
        let mut out = vec![0f32; self.ids.len() * e];
        out.par_chunks_mut(e)
            .zip(self.ids.par_iter().zip(self.type_ids.par_iter()))
            .for_each(|(row, (&id, &ty))| {
                let w = &word[id as usize * e..(id as usize + 1) * e];
                let t = &types[ty as usize * e..(ty as usize + 1) * e];
                for ((o, a), b) in row.iter_mut().zip(w).zip(t) {
                    *o = a + b;
                }
            });
        Ok((CpuStorage::F32(out), self.shape.clone()))
    }

    fn bwd(
        &self,
        word: &Tensor,
        types: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (vocab, e) = word.dims2()?;
        let type_vocab = types.dim(0)?;
        let (dw, dt) = with_f32(g, "embedding backward", |g| {
            Ok((
                scatter(g, &self.ids, vocab, e),
                scatter(g, &self.type_ids, type_vocab, e),
            ))
        })?;
        Ok((
            Some(tensor(dw, word.shape())?),
            Some(tensor(dt, types.shape())?),
        ))
    }
}
