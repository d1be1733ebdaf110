//! Figures drawn with plotters, once, onto any of its backends: SVG and PNG files in the CLI
//! (`headprint figure`, through [`output`]), and the HTML canvas of the page's dense views
//! (`crates/web/src/ui/canvas.rs`). One file per figure; [`matrix`] is the labelled, colour-barred
//! grid of cells the heatmaps, the head grid and the OV logit matrix share; [`colour`] the colour
//! maps every chart reads. [`svg`] holds the page's light charts, drawn as inline SVG strings.

pub mod attention;
pub mod colour;
pub mod composition;
pub mod copying;
pub mod matrix;
pub mod metric;
pub mod scatter;
pub mod self_copy;
pub mod spectrum;
pub mod svg;
pub mod swap;
pub mod timeline;
pub mod verdicts;

#[cfg(not(target_arch = "wasm32"))]
pub mod output;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Every figure draws onto a drawing area of this kind.
pub type Area<DB> = DrawingArea<DB, Shift>;
/// What a drawing step returns.
pub type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The one font family figures use; natively it is the bundled DejaVu Sans (`output`), in the
/// browser the page's sans-serif.
pub const FONT: &str = "sans-serif";

/// How a token is shown in labels: visible whitespace, and bidirectional controls (which would
/// reorder the text around the token, e.g. U+202E) replaced by U+FFFD.
pub fn visible(token: &str) -> String {
    token
        .chars()
        .map(|c| match c {
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => '\u{fffd}',
            ' ' => '\u{2423}',
            '\n' => '\u{23ce}',
            '\t' => '\u{21e5}',
            'Ġ' => '\u{2423}',
            'Ċ' => '\u{23ce}',
            c => c,
        })
        .collect()
}

/// A token as a figure's label: [`visible`], and characters XML 1.0 forbids as U+FFFD (an SVG
/// figure stays well-formed whatever the vocabulary holds).
pub fn token_label(token: &str) -> String {
    visible(token)
        .chars()
        .map(|c| if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' { '\u{fffd}' } else { c })
        .collect()
}

/// A number for display: short, with ∞ for infinity.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "∞".into() } else { "-∞".into() }
    } else if v != 0.0 && (v.abs() >= 1e4 || v.abs() < 1e-3) {
        format!("{v:.2e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Text of `size` px in `colour`, anchored at (`h`, `v`).
pub fn text_style(size: f64, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&colour).pos(Pos::new(h, v))
}

/// The same, rotated to read upwards (column labels, y-axis names).
pub fn upward_text_style(size: f64, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    (FONT, size).into_font().transform(FontTransform::Rotate270).color(&colour).pos(Pos::new(h, v))
}

pub const INK: RGBColor = RGBColor(34, 34, 34);
pub const GREY: RGBColor = RGBColor(102, 102, 102);
pub const RULE: RGBColor = RGBColor(204, 204, 204);
/// Induction cells' outline (the page's heatmap uses the same pink).
pub const MARK: RGBColor = RGBColor(255, 45, 138);

/// The axes of a chart of points and lines: grey tick labels, ink axis names, light grid lines
/// at the labelled ticks only.
pub fn plain_mesh<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut plotters::chart::MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut plotters::chart::MeshStyle<'a, 'b, X, Y, DB>
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
    DB: DrawingBackend,
{
    mesh.label_style((FONT, 10).into_font().color(&GREY))
        .axis_desc_style((FONT, 12).into_font().color(&INK))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(232, 232, 232))
        .axis_style(GREY)
}

/// A title at the top left of `area`.
pub fn title<DB: DrawingBackend>(area: &Area<DB>, text: &str) -> DrawResult<DB> {
    area.draw_text(text, &text_style(15.0, INK, HPos::Left, VPos::Top), (10, 8))
}
