//! The CPU layer's domain, f32 tensors on the CPU, and their data as plain slices.

use candle_core::{CpuStorage, DType, Device, Layout, Storage, StorageRef, Tensor};

/// Whether tensors of `dtype` on `device` are the CPU layer's: f32 on the CPU.
pub(crate) fn f32_on_cpu(device: &Device, dtype: DType) -> bool {
    device.is_cpu() && dtype == DType::F32
}

/// Whether every tensor is f32 on the CPU ([`f32_on_cpu`]).
pub(crate) fn all_f32_on_cpu(tensors: &[&Tensor]) -> bool {
    tensors.iter().all(|t| f32_on_cpu(t.device(), t.dtype()))
}

/// The f32 elements of a contiguous CPU storage under `layout`.
///
/// # Errors
/// A storage that is not f32, a layout that is not contiguous (each naming `what`).
pub(crate) fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        return Err(candle_core::Error::Msg(format!("{what}: expected f32")));
    };
    layout
        .contiguous_offsets()
        .and_then(|(start, end)| data.get(start..end))
        .ok_or_else(|| candle_core::Error::Msg(format!("{what}: expected a contiguous tensor")))
}

/// [`f32_slice`], mutable (an in-place update).
///
/// # Errors
/// As [`f32_slice`].
pub(crate) fn f32_slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a mut [f32]> {
    let CpuStorage::F32(data) = storage else {
        return Err(candle_core::Error::Msg(format!("{what}: expected f32")));
    };
    layout
        .contiguous_offsets()
        .and_then(|(start, end)| data.get_mut(start..end))
        .ok_or_else(|| candle_core::Error::Msg(format!("{what}: expected a contiguous tensor")))
}

/// Runs `f` on the f32 elements of `t` (made contiguous first if needed).
///
/// # Errors
/// A tensor that is not f32 on the CPU; the errors of `f`.
pub(crate) fn with_f32<R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(&[f32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(candle_core::Error::Msg(format!(
            "{what}: expected a CPU tensor"
        )));
    };
    f(f32_slice(cpu, layout, what)?)
}

/// A tensor of shape `shape` holding `data`, on the CPU.
///
/// # Errors
/// A shape whose element count is not `data.len()`.
pub(crate) fn tensor(data: Vec<f32>, shape: &candle_core::Shape) -> candle_core::Result<Tensor> {
    Tensor::from_vec(data, shape.clone(), &Device::Cpu)
}

/// A tensor's storage, read-locked for as long as its data is in use.
pub(crate) struct Held<'a> {
    storage: StorageRef<'a>,
    layout: &'a Layout,
}

impl<'a> Held<'a> {
    /// Locks `t`'s storage for reading.
    pub(crate) fn new(t: &'a Tensor) -> Self {
        let (storage, layout) = t.storage_and_layout();
        Held { storage, layout }
    }

    /// The elements, if the tensor is contiguous f32 on the CPU.
    pub(crate) fn f32s(&self) -> Option<&[f32]> {
        let Storage::Cpu(cpu) = &*self.storage else {
            return None;
        };
        f32_slice(cpu, self.layout, "held tensor").ok()
    }
}
