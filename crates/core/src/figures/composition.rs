//! Composition between heads (docs/methods.md#8-circuits-between-heads): one writer × reader map
//! per kind (Q, K, V), every head against every head, coloured by the score over the kind's random
//! baseline; below them the pairs above a threshold as a graph of layers, heads in columns, an edge
//! from writer to reader coloured by kind.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::colour::Scale;
use super::matrix::{BAR_SPACE, Layout, colour_bar, draw_cells};
use super::{Area, DrawResult, GREY, INK, RULE, text_style, title};
use crate::analysis::composition::{Composition, CompositionKind};
use crate::analysis::head::HeadId;

/// Each kind's colour in the graph: Q blue, K vermilion, V bluish green (Okabe–Ito, told apart
/// by colour-blind readers too).
pub const KIND_COLOURS: [RGBColor; 3] = [RGBColor(0, 114, 178), RGBColor(213, 94, 0), RGBColor(0, 158, 115)];

pub struct CompositionChart {
    pub layers: usize,
    pub heads: usize,
    /// Per kind (Q, K, V), the ratio of every pair to the kind's baseline, flat
    /// `[l1, h1, l2, h2]`.
    pub ratios: [Vec<f64>; 3],
    /// The pairs drawn in the graph: (kind, writer, reader, ratio), strongest first.
    pub edges: Vec<(CompositionKind, HeadId, HeadId, f64)>,
    /// The ratio an edge must reach to be drawn.
    pub threshold: f64,
    pub title: String,
}

pub const WIDTH: u32 = 1100;
const MAP_TOP: f64 = 80.0;
const GRAPH_HEIGHT: f64 = 360.0;

impl CompositionChart {
    /// The chart of a report: every pair's ratio, and the `most` strongest pairs whose ratio is
    /// `threshold` or more.
    pub fn of(report: &Composition, threshold: f64, most: usize, title: String) -> CompositionChart {
        let ratios = CompositionKind::ALL.map(|kind| {
            let base = report.baseline(kind).mean;
            report.scores.flat(kind).iter().map(|s| s / base).collect()
        });
        let mut edges: Vec<_> = report
            .above_baseline(threshold)
            .into_iter()
            .map(|e| {
                let id = |name: &str| HeadId::parse_within(name, report.scores.layers, report.scores.heads);
                (e.kind, id(&e.from), id(&e.to), e.ratio)
            })
            .filter_map(|(kind, from, to, ratio)| Some((kind, from.ok()?, to.ok()?, ratio)))
            .collect();
        edges.sort_by(|a, b| b.3.total_cmp(&a.3));
        edges.truncate(most);
        CompositionChart { layers: report.scores.layers, heads: report.scores.heads, ratios, edges, threshold, title }
    }

    fn count(&self) -> usize {
        self.layers * self.heads
    }

    /// One map's cells: three maps and their colour bar across the width.
    pub fn layout(&self, kind: usize) -> Layout {
        let n = self.count().max(1) as f64;
        let side = ((WIDTH as f64 - 80.0 - BAR_SPACE - 3.0 * 50.0) / 3.0).min(300.0);
        let cell = side / n;
        let x = 50.0 + kind as f64 * (side + 50.0);
        Layout::new(x, MAP_TOP, cell, self.count(), self.count())
    }

    fn graph_top(&self) -> f64 {
        let map = self.layout(0);
        map.y + map.height() + 50.0
    }

    pub fn size(&self) -> (u32, u32) {
        (WIDTH, (self.graph_top() + GRAPH_HEIGHT + 30.0) as u32)
    }

    pub fn scale(&self) -> Scale {
        let top = self.ratios.iter().flatten().copied().fold(0.0, f64::max);
        Scale::sequential(0.0, top.max(2.0), "score / random baseline")
    }

    fn ratio(&self, kind: usize, writer: usize, reader: usize) -> Option<f64> {
        let (l1, l2) = (writer / self.heads.max(1), reader / self.heads.max(1));
        (l1 < l2).then(|| self.ratios[kind][writer * self.count() + reader])
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let scale = self.scale();
        for (k, kind) in CompositionKind::ALL.iter().enumerate() {
            let layout = self.layout(k);
            draw_cells(area, &layout, &scale, |r, c| self.ratio(k, r, c))?;
            let (x0, y0) = (layout.x, layout.y);
            let (x1, y1) = (x0 + layout.width(), y0 + layout.height());
            // Layer boundaries, so a block of cells reads as a pair of layers, and the layers
            // named along the top (readers) and the left (writers).
            let block = layout.cell_w * self.heads as f64;
            for l in 0..self.layers {
                let at = l as f64 * block;
                if l > 0 {
                    area.draw(&PathElement::new(
                        vec![((x0 + at) as i32, y0 as i32), ((x0 + at) as i32, y1 as i32)],
                        RULE,
                    ))?;
                    area.draw(&PathElement::new(
                        vec![(x0 as i32, (y0 + at) as i32), (x1 as i32, (y0 + at) as i32)],
                        RULE,
                    ))?;
                }
                if block >= 14.0 || l % (14.0 / block).ceil() as usize == 0 {
                    let middle = at + block / 2.0;
                    let label = format!("L{l}");
                    area.draw_text(
                        &label,
                        &text_style(9.0, GREY, HPos::Center, VPos::Bottom),
                        ((x0 + middle) as i32, (y0 - 3.0) as i32),
                    )?;
                    area.draw_text(
                        &label,
                        &text_style(9.0, GREY, HPos::Right, VPos::Center),
                        ((x0 - 3.0) as i32, (y0 + middle) as i32),
                    )?;
                }
            }
            area.draw(&Rectangle::new([(x0 as i32 - 1, y0 as i32 - 1), (x1 as i32, y1 as i32)], RULE))?;
            area.draw_text(
                &format!("{}-composition: writer (rows) into reader (columns)", kind.name().to_uppercase()),
                &text_style(12.0, KIND_COLOURS[k], HPos::Left, VPos::Bottom),
                (x0 as i32, (y0 - 18.0) as i32),
            )?;
        }
        let last = self.layout(2);
        colour_bar(area, last.x + last.width() + 16.0, last.y, last.height().clamp(90.0, 260.0), &scale)?;
        self.draw_graph(area)
    }

    /// Heads as dots in one column per layer; an edge per drawn pair, writer to reader.
    fn draw_graph<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        let top = self.graph_top();
        let (left, right) = (70.0, WIDTH as f64 - 40.0);
        let column = (right - left) / self.layers.saturating_sub(1).max(1) as f64;
        let row = (GRAPH_HEIGHT - 40.0) / self.heads.max(1) as f64;
        let at = |id: HeadId| {
            let x = left + id.layer as f64 * column;
            let y = top + 30.0 + (id.head as f64 + 0.5) * row;
            (x as i32, y as i32)
        };
        area.draw_text(
            &format!(
                "pairs at {:.1}× their baseline or more ({} drawn): Q blue, K vermilion, V green",
                self.threshold,
                self.edges.len()
            ),
            &text_style(12.0, INK, HPos::Left, VPos::Top),
            (left as i32 - 40, top as i32),
        )?;
        let strongest = self.edges.first().map_or(1.0, |e| e.3).max(self.threshold);
        // Weakest first, so the strongest lie on top.
        for &(kind, from, to, ratio) in self.edges.iter().rev() {
            let width = 1.0 + 3.0 * ((ratio - self.threshold) / (strongest - self.threshold).max(1e-9)).clamp(0.0, 1.0);
            let colour = KIND_COLOURS[CompositionKind::ALL.iter().position(|&k| k == kind).unwrap_or(0)];
            area.draw(&PathElement::new(vec![at(from), at(to)], colour.mix(0.75).stroke_width(width as u32)))?;
        }
        let radius = (row * 0.3).clamp(1.5, 6.0) as i32;
        if row >= 9.0 {
            for head in 0..self.heads {
                let (x, y) = at(HeadId::new(0, head));
                area.draw_text(&format!("H{head}"), &text_style(10.0, GREY, HPos::Right, VPos::Center), (x - 12, y))?;
            }
        }
        for layer in 0..self.layers {
            let (x, _) = at(HeadId::new(layer, 0));
            area.draw_text(
                &format!("L{layer}"),
                &text_style(11.0, GREY, HPos::Center, VPos::Top),
                (x, (top + GRAPH_HEIGHT - 8.0) as i32),
            )?;
            for head in 0..self.heads {
                area.draw(&Circle::new(at(HeadId::new(layer, head)), radius, INK.filled()))?;
            }
        }
        Ok(())
    }
}
