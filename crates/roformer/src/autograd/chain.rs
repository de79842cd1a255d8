//! [`Branch`]es run one after another as ONE candle op (the blocks of a pre-norm stack):
//!
//! ```text
//! forward   x_0 = x;   x_{i+1} = F_i(x_i; p_i)   (i = 0 .. n-1);   y = x_n      (x_1 .. x_{n-1} kept)
//! backward  g_n = g;   (g_i, dp_i) = F_i'(x_i, p_i, g_{i+1})   (i = n-1 .. 0)
//!           dx = g_0,   dflat = [dp_0 | dp_1 | ... | dp_{n-1}]
//! ```
//!
//! with `flat = [p_0 | ... | p_{n-1}]`, one concatenation of every link's variables. The
//! values are those of the links run as ops of their own (their forward and backward are the
//! same calls on the same slices), but candle sees one node: where each link's op cost its
//! input a zero tensor and an add in candle's backward (`GradStore::or_insert`, then `add`:
//! 5.3 MB memset and an add over 5.3 MB per half of the Fashion-MNIST ViT, on one thread)
//! and its flat parameters one more, the chain pays that once for the stack. The tests hold
//! it to the links run apart (`ReferencePath::LinksApart`) bit for bit.

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::Tensor;

use crate::autograd::prenorm::{Branch, BranchOp};
use crate::cpu::reference_path::{self, ReferencePath};

/// One link of a chain: the branch and the tensors its flat parameters are the
/// concatenation of, in order (the model's variables, so that candle's `cat` hands each its
/// slice of the gradient).
pub(crate) struct Link {
    /// The branch's forward and backward on slices.
    pub(crate) branch: Box<dyn Branch>,
    /// The tensors of its flat parameter vector, each flattened, in the branch's order.
    pub(crate) params: Vec<Tensor>,
}

/// Hidden states as a stack of blocks leaves them: the last tensor made, and the links still
/// to run on it, run as one op when the states are next read ([`Chained::tensor`]).
pub(crate) struct Chained {
    input: Tensor,
    links: Vec<Link>,
}

impl Chained {
    /// The states `x`, no link pending.
    pub(crate) fn new(x: Tensor) -> Chained {
        Chained {
            input: x,
            links: Vec::new(),
        }
    }

    /// The tensor the pending links will read: it has the shape of the states (a link keeps
    /// its input's shape), so a link's shapes are checked against it.
    pub(crate) fn input(&self) -> &Tensor {
        &self.input
    }

    /// Adds `link` to run after the pending ones.
    pub(crate) fn push(&mut self, link: Link) {
        self.links.push(link);
    }

    /// `f` of the states (the pending links run first), which becomes the input.
    ///
    /// # Errors
    /// As [`Chained::tensor`]; the errors of `f`.
    pub(crate) fn then(
        &mut self,
        f: impl FnOnce(&Tensor) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<()> {
        let x = self.tensor()?;
        self.input = f(&x)?;
        Ok(())
    }

    /// The states: the pending links run as one op on the input ([`chain`]), which then
    /// becomes the input.
    ///
    /// # Errors
    /// As [`chain`].
    pub(crate) fn tensor(&mut self) -> candle_core::Result<Tensor> {
        let links = std::mem::take(&mut self.links);
        self.input = chain(&self.input, links)?;
        Ok(self.input.clone())
    }
}

/// `links` in order on `x` as one op of `x` and the concatenation of every link's
/// parameters (see the module doc); `x` itself for no links.
///
/// # Errors
/// Sizes that do not fit a link; candle errors (tensors that are not f32 on the CPU).
pub(crate) fn chain(x: &Tensor, links: Vec<Link>) -> candle_core::Result<Tensor> {
    if links.is_empty() {
        return Ok(x.clone());
    }
    let x = x.contiguous()?;
    if reference_path::taken(ReferencePath::LinksApart) {
        return links.into_iter().try_fold(x, |x, link| {
            let flat = Tensor::cat(&link.params, 0)?;
            x.apply_op2(&flat, BranchOp(Chain::new(vec![link.branch])))
        });
    }
    let params: Vec<Tensor> = links.iter().flat_map(|l| l.params.clone()).collect();
    let flat = Tensor::cat(&params, 0)?;
    let branches = links.into_iter().map(|l| l.branch).collect();
    x.apply_op2(&flat, BranchOp(Chain::new(branches)))
}

/// The links of one op: each branch's range of the flat parameters, and the inputs of all
/// but the first, kept by the forward for the backward.
struct Chain {
    links: Vec<Box<dyn Branch>>,
    ranges: Vec<Range<usize>>,
    block: usize,
    inputs: OnceLock<Vec<Vec<f32>>>,
}

impl Chain {
    /// `links` in order, their parameters one after another.
    fn new(links: Vec<Box<dyn Branch>>) -> Chain {
        let mut end = 0;
        let ranges = links
            .iter()
            .map(|l| {
                end += l.flat_len();
                end - l.flat_len()..end
            })
            .collect();
        let block = links.iter().fold(1, |b, l| lcm(b, l.input_block()));
        Chain {
            links,
            ranges,
            block,
            inputs: OnceLock::new(),
        }
    }
}

/// The least common multiple of `a` and `b` (0 if either is).
fn lcm(a: usize, b: usize) -> usize {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a.checked_div(x).map_or(0, |a| a * b)
}

impl Branch for Chain {
    fn name(&self) -> &'static str {
        match self.links.as_slice() {
            [only] => only.name(),
            _ => "chain",
        }
    }

    fn flat_len(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.end)
    }

    fn input_block(&self) -> usize {
        self.block
    }

    fn forward(&self, x: &[f32], flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let mut inputs: Vec<Vec<f32>> = Vec::with_capacity(self.links.len());
        for (link, range) in self.links.iter().zip(&self.ranges) {
            let input = inputs.last().map_or(x, Vec::as_slice);
            let y = link.forward(input, &flat[range.clone()])?;
            inputs.push(y);
        }
        let y = inputs.pop().unwrap_or_else(|| x.to_vec());
        // A fresh op per call: the cell is empty.
        let _ = self.inputs.set(inputs);
        Ok(y)
    }

    fn backward(
        &self,
        x: &[f32],
        flat: &[f32],
        g: &[f32],
    ) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
        let inputs = self
            .inputs
            .get()
            .ok_or_else(|| candle_core::Error::Msg("chain backward: no forward".into()))?;
        let mut dflat = Vec::with_capacity(self.links.len());
        let mut g_next: Option<Vec<f32>> = None;
        for (i, (link, range)) in self.links.iter().zip(&self.ranges).enumerate().rev() {
            let input = match i {
                0 => x,
                _ => inputs[i - 1].as_slice(),
            };
            let g_here = g_next.as_deref().unwrap_or(g);
            let (dx, dp) = link.backward(input, &flat[range.clone()], g_here)?;
            dflat.push(dp);
            g_next = Some(dx);
        }
        let dx = g_next.unwrap_or_else(|| g.to_vec());
        dflat.reverse();
        let dflat = match dflat.len() {
            1 => dflat.pop().unwrap_or_default(),
            _ => dflat.concat(),
        };
        Ok((dx, dflat))
    }
}
