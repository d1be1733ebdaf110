//! An attention pattern (query rows x key columns, causal) as a labelled matrix with its colour
//! bar and the induction cells outlined: one panel of the swap figure, and the page's canvas
//! heatmap for long prompts.

use plotters::prelude::*;

use super::colour::Scale;
use super::matrix::{Labels, Layout, draw_cells, draw_frame, outline};
use super::{Area, DrawResult, MARK, token_label};

pub struct Pattern<'a> {
    pub tokens: &'a [String],
    /// `rows[query][key]`; keys after the query are not drawn.
    pub rows: &'a [Vec<f64>],
    /// Induction cells (query, key), outlined.
    pub marks: &'a [(usize, usize)],
}

impl Pattern<'_> {
    /// The scale attention weights are drawn on.
    pub fn scale() -> Scale {
        Scale::sequential(0.0, 1.0, "attention weight")
    }

    /// Cells of `cell` px from (`x`, `y`).
    pub fn layout(&self, x: f64, y: f64, cell: f64) -> Layout {
        Layout::new(x, y, cell, self.tokens.len(), self.tokens.len())
    }

    /// The weight of query `q` on key `k`; None above the diagonal (the masked future).
    pub fn weight(&self, q: usize, k: usize) -> Option<f64> {
        if k > q { None } else { self.rows.get(q).and_then(|row| row.get(k)).copied() }
    }

    /// Labels, colour bar and marks; the cells too when `cells` (files), not when the caller
    /// fills them itself (the page's canvas).
    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>, layout: &Layout, cells: bool) -> DrawResult<DB> {
        let labels: Vec<String> = self.tokens.iter().map(|t| token_label(t)).collect();
        draw_frame(area, layout, &Labels { rows: &labels, cols: &labels, row_axis: "", col_axis: "" }, &Self::scale())?;
        if cells {
            draw_cells(area, layout, &Self::scale(), |q, k| self.weight(q, k))?;
        }
        self.draw_marks(area, layout)
    }

    pub fn draw_marks<DB: DrawingBackend>(&self, area: &Area<DB>, layout: &Layout) -> DrawResult<DB> {
        for &(q, k) in self.marks {
            if q < layout.rows && k < layout.cols {
                outline(area, layout, q, k, MARK)?;
            }
        }
        Ok(())
    }
}
