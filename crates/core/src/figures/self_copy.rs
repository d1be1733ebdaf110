//! The character-transformer case study's Figure 2: a head's top self-copy logits (the OV circuit's
//! diagonal, how much attending token i raises token i), raw beside normalised by
//! ‖W_E[i]‖·‖W_U[:,i]‖.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{Area, DrawResult, GREY, INK, RULE, num, text_style, title, token_label};

pub struct SelfCopy {
    pub title: String,
    /// (token, value), best first.
    pub raw: Vec<(String, f64)>,
    pub normalised: Vec<(String, f64)>,
}

const ROW: f64 = 22.0;
const RAW: RGBColor = RGBColor(33, 102, 172);
const NORMALISED: RGBColor = RGBColor(230, 97, 1);

impl SelfCopy {
    pub fn size(&self) -> (u32, u32) {
        let rows = self.raw.len().max(self.normalised.len()).max(1);
        (860, (70.0 + ROW * rows as f64 + 20.0) as u32)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let (w, _) = area.dim_in_pixel();
        let half = w as f64 / 2.0;
        bars(area, 0.0, half, "raw: (W_E W_V W_O W_U)[i, i]", &self.raw, RAW)?;
        bars(area, half, half, "normalised: ÷ ‖W_E[i]‖·‖W_U[:,i]‖", &self.normalised, NORMALISED)
    }
}

/// One panel of horizontal bars from `left`, `width` px wide.
fn bars<DB: DrawingBackend>(
    area: &Area<DB>,
    left: f64,
    width: f64,
    name: &str,
    entries: &[(String, f64)],
    colour: RGBColor,
) -> DrawResult<DB> {
    let top = 60.0;
    let (x0, x_end) = (left + 84.0, left + width - 70.0);
    area.draw_text(name, &text_style(12.0, INK, HPos::Left, VPos::Bottom), ((left + 20.0) as i32, (top - 8.0) as i32))?;
    let max = entries.iter().map(|(_, v)| v.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let lo = entries.iter().map(|(_, v)| *v).filter(|v| v.is_finite()).fold(0.0, f64::min);
    // Bars start at 0, or at the smallest value when some are negative.
    let span = max - lo.min(0.0);
    let x = |v: f64| x0 + (v - lo.min(0.0)) / span * (x_end - x0);
    let zero = x(0.0) as i32;
    for (i, (token, v)) in entries.iter().enumerate() {
        let y0 = top + i as f64 * ROW;
        let mid = (y0 + ROW / 2.0) as i32;
        area.draw_text(
            &format!("{}.", i + 1),
            &text_style(11.0, GREY, HPos::Right, VPos::Center),
            ((left + 28.0) as i32, mid),
        )?;
        area.draw_text(
            &token_label(token),
            &text_style(13.0, INK, HPos::Right, VPos::Center),
            ((x0 - 6.0) as i32, mid),
        )?;
        let end = x(*v) as i32;
        let (a, b) = if end < zero { (end, zero) } else { (zero, end.max(zero + 1)) };
        area.draw(&Rectangle::new([(a, (y0 + 3.0) as i32), (b, (y0 + ROW - 3.0) as i32)], colour.filled()))?;
        area.draw_text(&num(*v), &text_style(11.0, INK, HPos::Left, VPos::Center), (b + 4, mid))?;
    }
    let bottom = (top + ROW * entries.len() as f64) as i32;
    area.draw(&PathElement::new(vec![(zero, top as i32 - 2), (zero, bottom)], RULE))
}
