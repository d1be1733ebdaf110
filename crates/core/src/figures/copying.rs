//! The character-transformer case study's Figure 1: every head's OV copying score as a layer x head
//! grid (with its colour bar) above the same scores as bars, grouped by layer.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::colour::Scale;
use super::matrix::{BAR_SPACE, Labels, Layout, draw_cells, draw_frame};
use super::{Area, DrawResult, GREY, INK, RULE, num, text_style, title};

pub struct CopyingScores {
    pub layers: usize,
    pub heads: usize,
    /// Layer-major; None for a head whose OV circuit could not be read.
    pub values: Vec<Option<f64>>,
    /// The figure's title (model and mode).
    pub title: String,
}

pub const WIDTH: u32 = 900;
const BARS_HEIGHT: f64 = 220.0;

impl CopyingScores {
    fn value(&self, layer: usize, head: usize) -> Option<f64> {
        self.values.get(layer * self.heads + head).copied().flatten()
    }

    /// The grid's cells: as large as fit, up to 44 px.
    pub fn layout(&self) -> Layout {
        let cell = ((WIDTH as f64 - 120.0 - BAR_SPACE) / self.heads.max(1) as f64)
            .min(300.0 / self.layers.max(1) as f64)
            .clamp(4.0, 44.0);
        Layout::new(60.0, 64.0, cell, self.layers, self.heads)
    }

    pub fn size(&self) -> (u32, u32) {
        let grid = self.layout();
        (WIDTH, (grid.y + grid.height().max(90.0) + 40.0 + BARS_HEIGHT + 40.0) as u32)
    }

    pub fn scale() -> Scale {
        Scale::diverging(1.0, "OV copying score")
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let scale = Self::scale();
        let layout = self.layout();
        let rows: Vec<String> = (0..self.layers).map(|l| format!("L{l}")).collect();
        let cols: Vec<String> = (0..self.heads).map(|h| format!("H{h}")).collect();
        draw_frame(area, &layout, &Labels { rows: &rows, cols: &cols, row_axis: "", col_axis: "" }, &scale)?;
        draw_cells(area, &layout, &scale, |l, h| self.value(l, h))?;
        // Values in the cells when they fit; a circuit that could not be read says so.
        let font = (layout.cell_w * 0.26).clamp(0.0, 11.0);
        for l in 0..self.layers {
            for h in 0..self.heads {
                let (x0, y0, x1, y1) = layout.cell(l, h);
                let centre = ((x0 + x1) / 2, (y0 + y1) / 2);
                match self.value(l, h) {
                    Some(v) if font >= 7.0 => {
                        let rgb = super::colour::diverging(v);
                        let ink = if super::colour::dark_ink(rgb) { INK } else { WHITE };
                        area.draw_text(&format!("{v:.2}"), &text_style(font, ink, HPos::Center, VPos::Center), centre)?;
                    }
                    None => {
                        area.draw(&Rectangle::new([(x0, y0), (x1, y1)], RGBColor(251, 227, 230).filled()))?;
                        if font >= 7.0 {
                            area.draw_text(
                                "error",
                                &text_style(font, RGBColor(139, 15, 30), HPos::Center, VPos::Center),
                                centre,
                            )?;
                        }
                    }
                    _ => {}
                }
            }
        }
        self.draw_bars(area, layout.y + layout.height().max(90.0) + 40.0)
    }

    /// The bar chart below the grid, from `top`.
    fn draw_bars<DB: DrawingBackend>(&self, area: &Area<DB>, top: f64) -> DrawResult<DB> {
        let scale = Self::scale();
        let n = self.values.len().max(1);
        let (left, right) = (60.0, WIDTH as f64 - 20.0);
        let bar_w = (right - left) / n as f64;
        let y = |v: f64| top + BARS_HEIGHT * (1.0 - (v.clamp(-1.0, 1.0) + 1.0) / 2.0);
        for tick in [-1.0, -0.5, 0.0, 0.5, 1.0] {
            let ty = y(tick) as i32;
            area.draw(&PathElement::new(vec![(left as i32, ty), (right as i32, ty)], RULE))?;
            area.draw_text(&num(tick), &text_style(10.0, GREY, HPos::Right, VPos::Center), (left as i32 - 4, ty))?;
        }
        let base = y(0.0) as i32;
        for (i, value) in self.values.iter().enumerate() {
            let Some(v) = *value else { continue };
            let x0 = (left + i as f64 * bar_w).round() as i32;
            let x1 = ((left + (i + 1) as f64 * bar_w).round() as i32 - i32::from(bar_w >= 4.0)).max(x0 + 1);
            let top_y = y(v) as i32;
            let (a, b) = if top_y < base { (top_y, base) } else { (base, top_y.max(base + 1)) };
            area.draw(&Rectangle::new([(x0, a), (x1, b)], scale.colour(v).filled()))?;
        }
        // Layer boundaries and names.
        let label_every = (28.0 / (bar_w * self.heads as f64)).ceil().max(1.0) as usize;
        for l in 0..self.layers {
            let x = (left + (l * self.heads) as f64 * bar_w) as i32;
            area.draw(&PathElement::new(vec![(x, top as i32), (x, (top + BARS_HEIGHT + 4.0) as i32)], RULE))?;
            if l % label_every == 0 {
                area.draw_text(
                    &format!("L{l}"),
                    &text_style(10.0, GREY, HPos::Left, VPos::Top),
                    (x + 2, (top + BARS_HEIGHT + 6.0) as i32),
                )?;
            }
        }
        area.draw(&PathElement::new(vec![(left as i32, base), (right as i32, base)], INK))?;
        area.draw_text(
            "OV copying score of every head, in layer order",
            &text_style(11.0, GREY, HPos::Left, VPos::Bottom),
            (left as i32, top as i32 - 6),
        )
    }
}
