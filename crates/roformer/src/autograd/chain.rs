//! [`Branch`]es run one after another as ONE candle op (the blocks of a pre-norm stack):
//!
//! ```text
//! forward   x_0 = x;   x_{i+1} = F_i(x_i; p_i)   (i = 0 .. n-1);   y = x_n      (x_1 .. x_{n-1} kept)
//! backward  g_n = g;   (g_i, dp_i) = F_i'(x_i, p_i, g_{i+1})   (i = n-1 .. 0)
//!           dx = g_0,   dflat = [dp_0 | dp_1 | ... | dp_{n-1}]
//! ```
//!
//! with `flat = [p_0 | ... | p_{n-1}]`, one concatenation of every link's variables (each
//! flattened). The values are those of the links run as ops of their own (their forward and
//! backward are the same calls on the same slices), but candle sees one node: where each
//! link's op cost its input a zero tensor and an add in candle's backward
//! (`GradStore::or_insert`, then `add`: 5.3 MB memset and an add over 5.3 MB per half of the
//! Fashion-MNIST ViT, on one thread) and its flat parameters one more, the chain pays that
//! once for the stack. Given a sink ([`ParamGrads`], from the pass's plan) and variables for
//! parameters, `flat` is detached from candle's graph and `dflat`'s view of each variable
//! goes to the sink: no `cat` backward, no zero tensor and add per variable (nor per
//! flattened weight) at all. The tests hold both to the links run apart
//! (`ReferencePath::LinksApart`) bit for bit.

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use crate::autograd::param_grads::ParamGrads;
use crate::autograd::prenorm::{Branch, BranchOp};
use crate::cpu::reference_path::{self, ReferencePath};

/// One link of a chain: the branch and the tensors its flat parameters are the
/// concatenation of, in order (the model's variables, so that each gets its slice of the
/// gradient: from candle's `cat`, or from the chain through a sink).
pub(crate) struct Link {
    /// The branch's forward and backward on slices.
    pub(crate) branch: Box<dyn Branch>,
    /// The tensors of its flat parameter vector (each read flattened, row-major), in the
    /// branch's order.
    pub(crate) params: Vec<Tensor>,
}

/// Hidden states as a stack of blocks leaves them: the last tensor made, and the links still
/// to run on it, run as one op when the states are next read ([`Chained::tensor`]).
pub(crate) struct Chained {
    input: Tensor,
    links: Vec<Link>,
    sink: Option<ParamGrads>,
}

impl Chained {
    /// The states `x`, no link pending; the links' parameter gradients go to `sink` where
    /// there is one ([`chain`]).
    pub(crate) fn new(x: Tensor, sink: Option<&ParamGrads>) -> Chained {
        Chained {
            input: x,
            links: Vec::new(),
            sink: sink.cloned(),
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
        self.input = chain(&self.input, links, self.sink.as_ref())?;
        Ok(self.input.clone())
    }
}

/// `links` in order on `x` as one op of `x` and the concatenation of every link's
/// parameters (see the module doc); `x` itself for no links. With a `sink` and every
/// parameter a variable, the parameters' gradients go to the sink, not to candle's graph.
///
/// # Errors
/// Sizes that do not fit a link; candle errors (tensors that are not f32 on the CPU).
pub(crate) fn chain(
    x: &Tensor,
    links: Vec<Link>,
    sink: Option<&ParamGrads>,
) -> candle_core::Result<Tensor> {
    if links.is_empty() {
        return Ok(x.clone());
    }
    let x = x.contiguous()?;
    if reference_path::taken(ReferencePath::LinksApart) {
        return links.into_iter().try_fold(x, |x, link| {
            let flat = concatenation(&link.params)?;
            x.apply_op2(&flat, BranchOp(Chain::new(vec![link.branch])))
        });
    }
    let params: Vec<Tensor> = links.iter().flat_map(|l| l.params.clone()).collect();
    let flat = concatenation(&params)?;
    let op = BranchOp(Chain::new(links.into_iter().map(|l| l.branch).collect()));
    match sink.filter(|_| params.iter().all(Tensor::is_variable)) {
        None => x.apply_op2(&flat, op),
        Some(sink) => {
            let op = Delivered {
                op,
                params,
                sink: sink.clone(),
            };
            x.apply_op2(&flat.detach(), op)
        }
    }
}

/// `[p_0 | p_1 | ...]`, each tensor flattened (row-major).
fn concatenation(params: &[Tensor]) -> candle_core::Result<Tensor> {
    let flat = params
        .iter()
        .map(Tensor::flatten_all)
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&flat, 0)
}

/// A chain's op whose parameters' gradients go to `sink`, each variable's the view of `dflat`
/// at its place, its input's gradient to candle.
struct Delivered {
    op: BranchOp<Chain>,
    params: Vec<Tensor>,
    sink: ParamGrads,
}

impl CustomOp2 for Delivered {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.op.cpu_fwd(s1, l1, s2, l2)
    }

    fn bwd(
        &self,
        x: &Tensor,
        flat: &Tensor,
        res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dflat) = self.op.bwd(x, flat, res, g)?;
        if let Some(dflat) = dflat {
            let mut at = 0;
            let mut pairs = Vec::with_capacity(self.params.len());
            for p in &self.params {
                let n = p.elem_count();
                pairs.push((p.clone(), dflat.narrow(0, at, n)?.reshape(p.shape())?));
                at += n;
            }
            self.sink.deposit(pairs);
        }
        // `flat` is detached: candle keeps no gradient of it.
        Ok((dx, None))
    }
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
