//! Figures as files (native only): the format from the file name, text from the bundled font, so
//! the same figure is the same bytes on every machine and every run.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

use super::composition::CompositionChart;
use super::copying::CopyingScores;
use super::scatter::Scatter;
use super::self_copy::SelfCopy;
use super::spectrum::Spectra;
use super::swap::Swap;
use super::timeline::TimelineChart;
use super::verdicts::Verdicts;
use super::{Area, DrawResult, FONT};
use crate::{Error, Result};

/// DejaVu Sans 2.37 (licence in `src/figures/fonts/LICENSE.txt`): plotters lays out and
/// rasterises text with it instead of whatever fonts the machine has.
static DEJAVU_SANS: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold, FontStyle::Italic, FontStyle::Oblique] {
            // The bundled file is a valid TrueType font; a failure here is a build defect.
            plotters::style::register_font(FONT, style, DEJAVU_SANS).ok().expect("the bundled DejaVu Sans parses");
        }
    });
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    /// The format a file name asks for.
    pub fn of(path: &Path) -> Result<Format> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(Error::Invalid(format!(
                "{}: the figure's file name must end in .svg or .png (that picks the format)",
                path.display()
            ))),
        }
    }
}

/// One figure, ready to draw.
pub enum Figure {
    Copying(CopyingScores),
    Spectrum(Spectra),
    SelfCopy(SelfCopy),
    Swap(Swap),
    Verdicts(Verdicts),
    Scatter(Scatter),
    Timeline(TimelineChart),
    Composition(CompositionChart),
}

impl Figure {
    /// Width and height in pixels (a PNG's, and an SVG's viewport).
    pub fn size(&self) -> (u32, u32) {
        match self {
            Figure::Copying(f) => f.size(),
            Figure::Spectrum(f) => f.size(),
            Figure::SelfCopy(f) => f.size(),
            Figure::Swap(f) => f.size(),
            Figure::Verdicts(f) => f.size(),
            Figure::Scatter(f) => f.size(),
            Figure::Timeline(f) => f.size(),
            Figure::Composition(f) => f.size(),
        }
    }

    fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        match self {
            Figure::Copying(f) => f.draw(area),
            Figure::Spectrum(f) => f.draw(area),
            Figure::SelfCopy(f) => f.draw(area),
            Figure::Swap(f) => f.draw(area),
            Figure::Verdicts(f) => f.draw(area),
            Figure::Scatter(f) => f.draw(area),
            Figure::Timeline(f) => f.draw(area),
            Figure::Composition(f) => f.draw(area),
        }
    }

    /// The figure as the bytes of an SVG or PNG file.
    pub fn render(&self, format: Format) -> Result<Vec<u8>> {
        register_font();
        let (width, height) = self.size();
        let failed = |e: &dyn std::fmt::Display| Error::Figure(format!("drawing the figure failed: {e}"));
        match format {
            Format::Svg => {
                let mut svg = String::new();
                {
                    let area = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
                    self.draw(&area).map_err(|e| failed(&e))?;
                    area.present().map_err(|e| failed(&e))?;
                }
                Ok(svg.into_bytes())
            }
            Format::Png => {
                let mut pixels = vec![0u8; width as usize * height as usize * 3];
                {
                    let area = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
                    self.draw(&area).map_err(|e| failed(&e))?;
                    area.present().map_err(|e| failed(&e))?;
                }
                encode_png(&pixels, width, height).map_err(|e| failed(&e))
            }
        }
    }

    /// Draws the figure into `path`, in the format its extension names.
    pub fn write(&self, path: &Path) -> Result<()> {
        let bytes = self.render(Format::of(path)?)?;
        std::fs::write(path, bytes).map_err(|e| Error::File { path: path.display().to_string(), reason: e.to_string() })
    }
}

fn encode_png(rgb: &[u8], width: u32, height: u32) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Best);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(rgb)?;
    }
    Ok(out)
}
