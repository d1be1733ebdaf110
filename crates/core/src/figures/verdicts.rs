//! The character-transformer case study's Figures 4 and 5: a suite's verdict table as a picture.
//! Each prompt is a row of token boxes shaded by how much the query (outlined in black) attends to
//! each; the top key is outlined in its verdict's colour, the runner-up with a thin line, and both
//! are named at the right.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::colour::Scale;
use super::matrix::colour_bar;
use super::{Area, DrawResult, GREY, INK, RULE, text_style, title, token_label};
use crate::probes::suite::{Attended, Verdict, VerdictRow};

pub struct Verdicts {
    pub title: String,
    pub rows: Vec<VerdictRow>,
}

const ROW: f64 = 30.0;
const BOX: f64 = 18.0;
const ID: f64 = 64.0;
const TEXT: f64 = 360.0;

/// Each verdict's colour (colour-blind safe: ColorBrewer Dark2 and greys).
pub fn verdict_colour(verdict: Verdict) -> RGBColor {
    match verdict {
        Verdict::InductionSuccessor => RGBColor(217, 95, 2),
        Verdict::MatchingQuote => RGBColor(117, 112, 179),
        Verdict::OpenBracket => RGBColor(27, 158, 119),
        Verdict::MostRecentBracket => RGBColor(231, 41, 138),
        Verdict::PositionZeroSink => RGBColor(80, 80, 80),
        Verdict::Other => RGBColor(160, 160, 160),
    }
}

impl Verdicts {
    fn longest(&self) -> usize {
        self.rows.iter().map(|r| r.tokens.len()).max().unwrap_or(1).max(1)
    }

    pub fn size(&self) -> (u32, u32) {
        let width = ID + BOX * self.longest() as f64 + 16.0 + TEXT + 90.0;
        (width.max(600.0) as u32, (64.0 + ROW * self.rows.len().max(4) as f64 + 40.0) as u32)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let scale = Scale::sequential(0.0, 1.0, "attention weight");
        let top = 56.0;
        let text_x = ID + BOX * self.longest() as f64 + 16.0;
        area.draw_text(
            "top key → verdict (runner-up)",
            &text_style(11.0, GREY, HPos::Left, VPos::Bottom),
            (text_x as i32, top as i32 - 6),
        )?;
        for (i, row) in self.rows.iter().enumerate() {
            let y = top + i as f64 * ROW;
            let mid = (y + BOX / 2.0) as i32;
            area.draw_text(&row.id, &text_style(12.0, INK, HPos::Left, VPos::Center), (10, mid))?;
            for (k, token) in row.tokens.iter().enumerate() {
                let x0 = (ID + k as f64 * BOX) as i32;
                let (x1, y0, y1) = (x0 + BOX as i32, y as i32, (y + BOX) as i32);
                let weight = (k <= row.query_position).then(|| row.attention.get(k).copied()).flatten();
                let fill = match weight {
                    Some(w) => scale.colour(w),
                    None => RGBColor(238, 238, 238),
                };
                area.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))?;
                area.draw(&Rectangle::new([(x0, y0), (x1, y1)], WHITE))?;
                let rgb = match weight {
                    Some(w) => super::colour::viridis(w),
                    None => [238.0; 3],
                };
                let ink = if super::colour::dark_ink(rgb) { INK } else { WHITE };
                area.draw_text(
                    &token_label(token),
                    &text_style(11.0, ink, HPos::Center, VPos::Center),
                    ((x0 + x1) / 2, mid),
                )?;
            }
            let frame = |k: usize, colour: RGBColor, width: u32| {
                let x0 = (ID + k as f64 * BOX) as i32;
                Rectangle::new(
                    [(x0 - 1, y as i32 - 1), (x0 + BOX as i32, (y + BOX) as i32)],
                    colour.stroke_width(width),
                )
            };
            if let Some(r) = &row.runner_up {
                area.draw(&frame(r.position, verdict_colour(r.verdict), 1))?;
            }
            area.draw(&frame(row.top.position, verdict_colour(row.top.verdict), 3))?;
            area.draw(&frame(row.query_position, INK, 2))?;
            let runner =
                row.runner_up.as_ref().map(|r| format!("  ({} {:.2})", describe(r), r.weight)).unwrap_or_default();
            let line = format!("{} {:.2} → {}", describe(&row.top), row.top.weight, row.top.labels());
            area.draw_text(
                &line,
                &text_style(12.0, verdict_colour(row.top.verdict), HPos::Left, VPos::Center),
                (text_x as i32, mid - 5),
            )?;
            area.draw_text(&runner, &text_style(10.0, GREY, HPos::Left, VPos::Center), (text_x as i32, mid + 8))?;
            area.draw(&PathElement::new(
                vec![(10, (y + ROW - 5.0) as i32), ((text_x + TEXT) as i32, (y + ROW - 5.0) as i32)],
                RULE,
            ))?;
        }
        let bar_x = text_x + TEXT + 10.0;
        colour_bar(area, bar_x, top + 14.0, (ROW * self.rows.len().max(4) as f64 - 20.0).min(220.0), &scale)
    }
}

/// "12 `\"`": a key's position and token.
fn describe(a: &Attended) -> String {
    format!("{} {}", a.position, token_label(&a.token))
}
