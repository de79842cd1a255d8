//! Parameter gradients a training pass's fused ops hand over beside candle's graph, merged
//! into candle's store by the backward that reads them ([`ParamGrads::backward`]):
//!
//! ```text
//! candle's graph   y = op(x, cat(p_1 .. p_n))     backward: dflat -> zeros + add (cat's node)
//!                                                 -> narrow, zeros + add (each reshape)
//!                                                 -> zeros + add (each variable)
//! delivered here   y = op(x, detach(cat(p_1 .. p_n)))   backward: dflat -> p_i's gradient
//!                                                       = view i of dflat, inserted once
//! ```
//!
//! The values are the same: candle's chain of `0 + d` leaves every `d` as it is but `-0`,
//! which it makes `+0` (the ops' parameter gradients are sums started at `+0`, which are
//! never `-0`). What goes is the memory traffic candle spends to get there, on one thread:
//! three zero tensors and three adds over the parameters' size a step (10.7 MB each for the
//! Fashion-MNIST ViT's blocks).
//!
//! Only where a pass is given a sink ([`crate::plan::Plan::with_param_grads`]) do its ops
//! deliver here; whoever gives it runs the pass's backward through it, so that no store is
//! read without them.

use std::sync::{Arc, Mutex, PoisonError};

use candle_core::backprop::GradStore;
use candle_core::Tensor;

/// A sink of `(variable, gradient)` pairs, shared by a pass's ops (cloning shares it).
#[derive(Debug, Clone, Default)]
pub struct ParamGrads {
    pairs: Arc<Mutex<Vec<(Tensor, Tensor)>>>,
}

impl ParamGrads {
    /// An empty sink.
    pub fn new() -> ParamGrads {
        ParamGrads::default()
    }

    /// Adds the gradient `grad` (of `var`'s shape) of each `(var, grad)` pair.
    pub(crate) fn deposit(&self, pairs: impl IntoIterator<Item = (Tensor, Tensor)>) {
        let mut held = self.pairs.lock().unwrap_or_else(PoisonError::into_inner);
        held.extend(pairs);
    }

    /// `loss.backward()` with the gradients this sink received during it merged in (each
    /// stored as it is for a variable candle has no gradient of, added to candle's
    /// otherwise): every parameter's gradient of a pass given this sink.
    ///
    /// # Errors
    /// Candle errors of the backward or of the merge.
    pub fn backward(&self, loss: &Tensor) -> candle_core::Result<GradStore> {
        let mut store = loss.backward()?;
        self.merge_into(&mut store)?;
        Ok(store)
    }

    /// Moves every gradient held into `store`: stored as it is for a variable the store has
    /// no gradient of, added to the store's otherwise (a variable also read by candle's
    /// ops). The sink is empty after.
    ///
    /// # Errors
    /// Candle errors of the add (a gradient whose shape is not its variable's).
    fn merge_into(&self, store: &mut GradStore) -> candle_core::Result<()> {
        let pairs = std::mem::take(&mut *self.pairs.lock().unwrap_or_else(PoisonError::into_inner));
        for (var, grad) in pairs {
            let sum = match store.get(&var) {
                Some(g) => g.add(&grad)?,
                None => grad,
            };
            store.insert(&var, sum);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    #[test]
    fn merging_inserts_new_gradients_adds_to_candles_and_empties_the_sink() {
        let dev = Device::Cpu;
        let (a, b) = (
            Var::new(&[1f32, 2.0], &dev).unwrap(),
            Var::new(&[3f32], &dev).unwrap(),
        );
        // candle's gradient of `a` is 2 for each element; `b` is not in the graph.
        let mut store = (a.as_tensor() * 2.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(store.get(b.as_tensor()).is_none());
        let sink = ParamGrads::new();
        let grad = |v: &[f32]| Tensor::new(v, &dev).unwrap();
        sink.deposit([
            (a.as_tensor().clone(), grad(&[0.5, -1.0])),
            (b.as_tensor().clone(), grad(&[-0.0])),
        ]);
        sink.merge_into(&mut store).unwrap();
        let got = |s: &GradStore, v: &Var| s.get(v.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(got(&store, &a), [2.5, 1.0]);
        // Stored as given: no `0 + d` (which would make -0 into +0).
        assert_eq!(got(&store, &b)[0].to_bits(), (-0f32).to_bits());
        // The sink is empty: merging again changes nothing.
        sink.merge_into(&mut store).unwrap();
        assert_eq!(got(&store, &a), [2.5, 1.0]);
    }
}
