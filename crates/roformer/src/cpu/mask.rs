//! Additive attention masks as rows of keys.
//!
//! A mask `[mb, mh, mq, t]` adds `mask[s', h', i', j]` to the score of query `i` and key `j`
//! of head `h` in sequence `s`, where each of `s' = s`, `h' = h`, `i' = i` is 0 when that
//! dimension of the mask is 1 (broadcast): a padding mask is `[b, 1, 1, t]`, a causal mask
//! `[1, 1, t, t]`, a position bias (ALiBi, T5) plus padding `[1 or b, heads, t, t]`.

/// Whether an additive mask of dims `[mb, mh, mq, t]` (`mb` 1 or `b`, `mh` 1 or `heads`, `mq` 1
/// or `t`) fits `b` sequences of `t` tokens in `heads` heads.
pub(crate) fn mask_dims_fit(dims: &[usize], b: usize, heads: usize, t: usize) -> bool {
    match *dims {
        [mb, mh, mq, mt] => {
            (mb == 1 || mb == b) && (mh == 1 || mh == heads) && (mq == 1 || mq == t) && mt == t
        }
        _ => false,
    }
}

/// The row `(s', h', i')` of a mask whose first three dims are `[mb, mh, mq]` that the scores
/// of query `i` of head `head` in sequence `s` read: row-major, each index 0 where its dim is 1.
pub(crate) fn mask_row([mb, mh, mq]: [usize; 3], s: usize, head: usize, i: usize) -> usize {
    let pick = |x: usize, n: usize| if n == 1 { 0 } else { x };
    (pick(s, mb) * mh + pick(head, mh)) * mq + pick(i, mq)
}

/// An additive mask `[mb, mh, mq, t]` (each of the first three 1 or full) as rows of keys.
#[derive(Clone, Copy)]
pub(crate) struct MaskView<'a> {
    data: &'a [f32],
    /// The mask's dims `[mb, mh, mq]` (its rows are `t` long).
    dims: [usize; 3],
    t: usize,
}

impl<'a> MaskView<'a> {
    /// The view of `data` (a contiguous mask of dims `dims`) for `b` sequences of `t` tokens in
    /// `heads` heads; `None` when the dims or the length do not fit.
    pub(crate) fn new(
        data: &'a [f32],
        dims: &[usize],
        (b, heads, t): (usize, usize, usize),
    ) -> Option<Self> {
        let [mb, mh, mq, _] = *dims else {
            return None;
        };
        (mask_dims_fit(dims, b, heads, t) && data.len() == mb * mh * mq * t).then_some(MaskView {
            data,
            dims: [mb, mh, mq],
            t,
        })
    }

    /// The additive mask over keys for query `i` of head `head` in sequence `s`.
    pub(crate) fn row(&self, s: usize, head: usize, i: usize) -> &'a [f32] {
        let start = mask_row(self.dims, s, head, i) * self.t;
        &self.data[start..start + self.t]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_broadcast_over_the_dims_of_one() {
        let (b, heads, t) = (2, 3, 4);
        for dims in [
            [1, 1, 1, t],
            [b, 1, 1, t],
            [1, 1, t, t],
            [b, heads, t, t],
            [1, heads, t, t],
        ] {
            let n: usize = dims.iter().product();
            let data: Vec<f32> = (0..n).map(|x| x as f32).collect();
            let view = MaskView::new(&data, &dims, (b, heads, t)).unwrap();
            for s in 0..b {
                for h in 0..heads {
                    for i in 0..t {
                        let at = |x: usize, d: usize| if dims[d] == 1 { 0 } else { x };
                        let start = ((at(s, 0) * dims[1] + at(h, 1)) * dims[2] + at(i, 2)) * t;
                        assert_eq!(view.row(s, h, i), &data[start..start + t], "{dims:?}");
                    }
                }
            }
        }
        let data = vec![0f32; 2 * t];
        assert!(
            MaskView::new(&data, &[1, 2, 1, t], (b, heads, t)).is_none(),
            "2 of 3 heads"
        );
        assert!(
            MaskView::new(&data, &[1, 1, 1, t], (b, heads, t)).is_none(),
            "length"
        );
    }
}
