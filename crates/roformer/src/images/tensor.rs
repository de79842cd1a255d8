//! The image layer's results as candle tensors: the only place this module touches candle.

use candle_core::{Device, Result, Tensor};

use super::batch::ImageBatch;
use super::planes::Planes;

/// A batch as `(pixel_values [b, c, s, s] f32, labels [b] u32)` on `device`.
///
/// # Errors
/// candle's, when the device cannot hold the tensors.
pub fn batch_tensors(batch: &ImageBatch, device: &Device) -> Result<(Tensor, Tensor)> {
    let shape = (batch.batch, batch.channels, batch.side, batch.side);
    let pixels = Tensor::from_slice(&batch.pixels, shape, device)?;
    let labels = Tensor::from_slice(&batch.labels, batch.batch, device)?;
    Ok((pixels, labels))
}

/// One image as `pixel_values` `[1, c, h, w]` f32 on `device`.
///
/// # Errors
/// candle's, when the device cannot hold the tensor.
pub fn image_tensor(image: &Planes<f32>, device: &Device) -> Result<Tensor> {
    let shape = (1, image.channels(), image.height(), image.width());
    Tensor::from_slice(image.data(), shape, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_values_carry_over() {
        let batch = ImageBatch {
            pixels: (0..2 * 3 * 4 * 4).map(|v| v as f32).collect(),
            labels: vec![7, 1],
            batch: 2,
            channels: 3,
            side: 4,
        };
        let (pixels, labels) = batch_tensors(&batch, &Device::Cpu).unwrap();
        assert_eq!(pixels.dims(), &[2, 3, 4, 4]);
        assert_eq!(
            pixels.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            batch.pixels
        );
        assert_eq!(labels.to_vec1::<u32>().unwrap(), vec![7, 1]);
        let image = Planes::new(1, 2, 3, vec![0.5; 6]).unwrap();
        assert_eq!(
            image_tensor(&image, &Device::Cpu).unwrap().dims(),
            &[1, 1, 2, 3]
        );
    }
}
