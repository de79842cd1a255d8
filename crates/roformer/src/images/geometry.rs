//! Spatial operations other than resampling: windows cut with padding, centre crops and
//! mirror images, on `[c, h, w]` planes of any value type.

use super::error::ImageError;
use super::planes::Planes;

/// The `height x width` window of `planes` whose top-left corner is at row `top`, column
/// `left` (either may be negative or past the image): output `(y, x)` is input
/// `(top + y, left + x)` where that lies inside the image, `fill` elsewhere. A window larger
/// than the image pads it; torchvision's `RandomCrop(size, padding=p)` is such a window of
/// the image padded by `p`.
///
/// # Errors
/// [`ImageError::Empty`] when `height` or `width` is 0.
pub fn window<T: Copy>(
    planes: &Planes<T>,
    top: isize,
    left: isize,
    height: usize,
    width: usize,
    fill: T,
) -> Result<Planes<T>, ImageError> {
    let (c, h, w) = (planes.channels(), planes.height(), planes.width());
    if height == 0 || width == 0 {
        return Err(ImageError::Empty {
            channels: c,
            height,
            width,
        });
    }
    let area = height.checked_mul(width).and_then(|a| a.checked_mul(c));
    let mut out = Vec::with_capacity(area.unwrap_or(0));
    // The columns of the window inside the image: x in [x0, x1).
    let x0 = (-left).clamp(0, width as isize) as usize;
    let x1 = (w as isize - left).clamp(x0 as isize, width as isize) as usize;
    for ch in 0..c {
        let plane = planes.plane(ch);
        for y in 0..height {
            let row = top + y as isize;
            if row < 0 || row >= h as isize {
                out.extend(std::iter::repeat_n(fill, width));
                continue;
            }
            let start = row as usize * w;
            out.extend(std::iter::repeat_n(fill, x0));
            let from = (left + x0 as isize) as usize;
            out.extend_from_slice(&plane[start + from..start + from + (x1 - x0)]);
            out.extend(std::iter::repeat_n(fill, width - x1));
        }
    }
    Planes::new(c, height, width, out)
}

/// The centred `height x width` window, as transformers' `center_crop`: an image smaller than
/// the window is first padded with `fill`, by `floor(d / 2)` before and `ceil(d / 2)` after
/// on an axis short by `d`; then the window starts at `floor((n - size) / 2)` on each axis of
/// the (padded) length `n`.
///
/// # Errors
/// [`ImageError::Empty`] when `height` or `width` is 0.
pub fn centre_crop<T: Copy>(
    planes: &Planes<T>,
    height: usize,
    width: usize,
    fill: T,
) -> Result<Planes<T>, ImageError> {
    let start = |n: usize, size: usize| -> isize {
        if size > n {
            // Padded by floor(d / 2) before: the window starts that far before the image.
            -(((size - n) / 2) as isize)
        } else {
            ((n - size) / 2) as isize
        }
    };
    window(
        planes,
        start(planes.height(), height),
        start(planes.width(), width),
        height,
        width,
        fill,
    )
}

/// The mirror image left to right: output `(y, x)` is input `(y, w - 1 - x)`.
pub fn flip_horizontal<T: Copy>(planes: &Planes<T>) -> Planes<T> {
    let mut out = planes.clone();
    let w = planes.width();
    if w > 0 {
        for row in out.data_mut().chunks_exact_mut(w) {
            row.reverse();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `1 x h x w` image whose value is `10 y + x`.
    fn ramp(h: usize, w: usize) -> Planes<i32> {
        Planes::new(
            1,
            h,
            w,
            (0..h * w).map(|i| (10 * (i / w) + i % w) as i32).collect(),
        )
        .unwrap()
    }

    #[test]
    fn windows_read_inside_and_fill_outside() {
        let image = ramp(3, 4);
        let inside = window(&image, 1, 1, 2, 2, -1).unwrap();
        assert_eq!(inside.data(), &[11, 12, 21, 22]);
        let corner = window(&image, -1, -2, 3, 4, -1).unwrap();
        assert_eq!(
            corner.data(),
            &[-1, -1, -1, -1, -1, -1, 0, 1, -1, -1, 10, 11]
        );
        let past = window(&image, 2, 3, 2, 3, -1).unwrap();
        assert_eq!(past.data(), &[23, -1, -1, -1, -1, -1]);
        let away = window(&image, 10, -10, 1, 2, -1).unwrap();
        assert_eq!(away.data(), &[-1, -1]);
        let padded = window(&image, -1, -1, 5, 6, 0).unwrap();
        assert_eq!(
            padded.data().iter().sum::<i32>(),
            image.data().iter().sum::<i32>()
        );
        assert!(window(&image, 0, 0, 0, 2, 0).is_err());
    }

    #[test]
    fn centre_crops_follow_transformers() {
        let image = ramp(5, 4);
        // (5 - 2) / 2 = 1 row, (4 - 3) / 2 = 0 columns.
        assert_eq!(
            centre_crop(&image, 2, 3, 0).unwrap().data(),
            &[10, 11, 12, 20, 21, 22]
        );
        // Too small: 1 column of padding before and 2 after, then the whole padded width.
        let wide = centre_crop(&ramp(1, 2), 1, 5, -1).unwrap();
        assert_eq!(wide.data(), &[-1, 0, 1, -1, -1]);
    }

    #[test]
    fn flips_mirror_rows_and_undo_themselves() {
        let image = ramp(2, 3);
        let flipped = flip_horizontal(&image);
        assert_eq!(flipped.data(), &[2, 1, 0, 12, 11, 10]);
        assert_eq!(flip_horizontal(&flipped), image);
    }
}
