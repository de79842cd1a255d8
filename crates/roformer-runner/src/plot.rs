//! Writing figures to PNG or SVG, chosen by the file's extension.
//!
//! PNG text is rendered by plotters' `ab_glyph` backend from a font embedded in the binary
//! (a subset of DejaVu Sans made by `scripts/subset_font.py`), so no system font library is
//! needed at build or run time. SVG text is left to the viewer's fonts; the embedded font is
//! still registered because plotters measures text with it to lay out labels.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, bail, Context};
use image::codecs::png::PngEncoder;
use image::{ColorType, ImageEncoder};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::output;

/// The embedded font (DejaVu Sans subset: printable ASCII and a few math symbols).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");

/// The family name figures use for text.
pub const FAMILY: &str = "sans-serif";

/// An image file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Portable Network Graphics (raster).
    Png,
    /// Scalable Vector Graphics.
    Svg,
}

impl Format {
    /// The format named by `path`'s extension (`.png` or `.svg`, any case).
    ///
    /// # Errors
    /// When the extension is missing or names another format.
    pub fn from_path(path: &Path) -> anyhow::Result<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("png") => Ok(Format::Png),
            Some("svg") => Ok(Format::Svg),
            _ => bail!(
                "{}: plots are written as .png or .svg, chosen by the extension",
                path.display()
            ),
        }
    }
}

/// Something that draws itself onto any plotters backend.
pub trait Figure {
    /// Draws the whole figure onto `root` (already cleared to white).
    ///
    /// # Errors
    /// Drawing errors of the backend.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()>;
}

/// Turns a plotters error (whose backend error type may not be `'static`) into an
/// [`anyhow::Error`].
pub fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// Registers the embedded font once per process.
fn register_font() -> anyhow::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| anyhow!("the embedded plot font could not be parsed"));
    });
    result
}

/// Writes `figure` to `path` as a `size` (width, height) pixel image, PNG or SVG by extension,
/// through [`output::write`] (drawn in memory, then written at once).
///
/// # Errors
/// An unknown extension, a drawing error, or a file that cannot be written.
pub fn save(figure: &impl Figure, path: &Path, size: (u32, u32)) -> anyhow::Result<()> {
    let format = Format::from_path(path)?;
    register_font()?;
    let bytes = match format {
        Format::Png => png(figure, size),
        Format::Svg => svg(figure, size),
    }
    .with_context(|| format!("drawing {}", path.display()))?;
    output::write(path, &bytes)
}

/// `figure` as PNG bytes.
fn png(figure: &impl Figure, (width, height): (u32, u32)) -> anyhow::Result<Vec<u8>> {
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        figure.draw(&root)?;
        root.present().map_err(err)?;
    }
    let mut bytes = Vec::new();
    PngEncoder::new(&mut bytes)
        .write_image(&rgb, width, height, ColorType::Rgb8)
        .context("encoding the PNG")?;
    Ok(bytes)
}

/// `figure` as an SVG document.
fn svg(figure: &impl Figure, size: (u32, u32)) -> anyhow::Result<Vec<u8>> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        figure.draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(text.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(Format::from_path(Path::new("a.png")).unwrap(), Format::Png);
        assert_eq!(Format::from_path(Path::new("a.SVG")).unwrap(), Format::Svg);
        assert!(Format::from_path(Path::new("a.jpg")).is_err());
        assert!(Format::from_path(Path::new("plot")).is_err());
    }
}
