//! What the quantized kernels' tests (`q4_1_kernel.rs`, `q8_0_kernel.rs`) share: a small seeded
//! generator, outputs as bits, and the refusals every kernel owes.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use llama::LlamaError;

/// The kernels' tests' generator.
pub use test_support::SplitMix64 as Rng;

/// Each value's bits, so that outputs compare exactly.
pub fn bits(rows: Vec<Vec<f32>>) -> Vec<Vec<u32>> {
    rows.into_iter()
        .map(|row| row.into_iter().map(f32::to_bits).collect())
        .collect()
}

/// A kernel's constructors and products, as its tests call them.
pub struct Kernel<M> {
    /// The block type it reads.
    pub dtype: GgmlDType,
    /// Three block types it must refuse.
    pub others: [GgmlDType; 3],
    pub from_qtensor: fn(&QTensor) -> llama::Result<M>,
    pub from_blocks: fn(&[u8], usize, usize) -> llama::Result<M>,
    pub forward: fn(&M, &Tensor) -> llama::Result<Tensor>,
    pub matmul: fn(&M, &[f32], &mut [f32]) -> llama::Result<()>,
}

/// The kernel refuses, with the right error, a weight (`w`, `[4, 64]`) of another block type or
/// rank, raw blocks of the wrong size, inputs of the wrong width, dtype or rank, and slices of
/// the wrong lengths; and accepts the right ones.
pub fn refuses_what_does_not_fit<M>(kernel: &Kernel<M>, w: &Tensor) {
    // Not the kernel's block type.
    for dtype in kernel.others {
        let q = QTensor::quantize(w, dtype).unwrap();
        let err = (kernel.from_qtensor)(&q).err().expect("another block type");
        assert!(
            matches!(err, LlamaError::Unsupported(_)),
            "{dtype:?}: {err}"
        );
    }
    // Not two-dimensional.
    let w3 = w.reshape((2, 2, 64)).unwrap();
    let q3 = QTensor::quantize(&w3, kernel.dtype).unwrap();
    assert!(matches!(
        (kernel.from_qtensor)(&q3),
        Err(LlamaError::Unsupported(_))
    ));
    // Raw blocks: k not a multiple of 32, or the wrong byte count.
    let q = QTensor::quantize(w, kernel.dtype).unwrap();
    let bytes = q.data().unwrap();
    assert!((kernel.from_blocks)(&bytes, 4, 64).is_ok());
    for (n_out, k) in [(4, 48), (4, 65), (3, 64), (4, 96), (5, 64)] {
        let err = (kernel.from_blocks)(&bytes, n_out, k)
            .err()
            .expect("a wrong size");
        assert!(
            matches!(err, LlamaError::Unsupported(_)),
            "[{n_out}, {k}]: {err}"
        );
    }
    // Inputs of the wrong width, dtype or rank.
    let ours = (kernel.from_qtensor)(&q).unwrap();
    let cases = [
        Tensor::zeros((2, 32), DType::F32, &Device::Cpu).unwrap(),
        Tensor::zeros((2, 96), DType::F32, &Device::Cpu).unwrap(),
        Tensor::zeros((2, 64), DType::F64, &Device::Cpu).unwrap(),
        Tensor::new(1f32, &Device::Cpu).unwrap(),
    ];
    for x in cases {
        let err = (kernel.forward)(&ours, &x).unwrap_err();
        assert!(
            matches!(err, LlamaError::Request(_)),
            "{:?}: {err}",
            x.shape()
        );
    }
    // Slices of the wrong lengths.
    let mut out = vec![0f32; 8];
    assert!((kernel.matmul)(&ours, &[0.0; 100], &mut out).is_err());
    assert!((kernel.matmul)(&ours, &[0.0; 128], &mut out[..7]).is_err());
    assert!((kernel.matmul)(&ours, &[0.0; 128], &mut out).is_ok());
}
