//! Additive attention masks as rows of keys.

/// Whether an additive mask of dims `[mb, 1, mq, t]` (`mb` 1 or `b`, `mq` 1 or `t`) fits `b`
/// sequences of `t` tokens.
pub(crate) fn mask_dims_fit(dims: &[usize], b: usize, t: usize) -> bool {
    match *dims {
        [mb, 1, mq, mt] => (mb == 1 || mb == b) && (mq == 1 || mq == t) && mt == t,
        _ => false,
    }
}

/// An additive mask `[mb, 1, mq, t]` (`mb` 1 or the batch, `mq` 1 or `t`) as rows of keys.
#[derive(Clone, Copy)]
pub(crate) struct MaskView<'a> {
    data: &'a [f32],
    per_sequence: bool,
    per_query: bool,
    t: usize,
}

impl<'a> MaskView<'a> {
    /// The view of `data` (a contiguous mask of dims `dims`) for `b` sequences of `t`; `None`
    /// when the dims or the length do not fit.
    pub(crate) fn new(data: &'a [f32], dims: &[usize], b: usize, t: usize) -> Option<Self> {
        let [mb, 1, mq, _] = *dims else {
            return None;
        };
        (mask_dims_fit(dims, b, t) && data.len() == mb * mq * t).then_some(MaskView {
            data,
            per_sequence: mb != 1,
            per_query: mq != 1,
            t,
        })
    }

    /// The additive mask over keys for query `i` of sequence `s` (of the whole batch).
    pub(crate) fn row(&self, s: usize, i: usize) -> &'a [f32] {
        let mq = if self.per_query { self.t } else { 1 };
        let s = if self.per_sequence { s } else { 0 };
        let i = if self.per_query { i } else { 0 };
        let start = (s * mq + i) * self.t;
        &self.data[start..start + self.t]
    }
}
