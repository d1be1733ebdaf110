//! The spectral-fingerprint study's question as a picture: one spectral feature against one
//! behavioural score across a model's heads, with Spearman's ρ (the same function `compare` reports
//! it from).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{Area, DrawResult, GREY, INK, plain_mesh, text_style, title};

pub struct Scatter {
    pub title: String,
    pub x_name: String,
    pub y_name: String,
    /// (head, x, y); points with a non-finite value are left out (and counted in the note).
    pub points: Vec<(String, f64, f64)>,
    pub rho: Option<f64>,
    pub n: usize,
    /// How many heads to name, highest y first.
    pub named: usize,
}

/// ρ as the figure prints it.
pub fn rho_text(rho: Option<f64>, n: usize) -> String {
    match rho {
        Some(r) => format!("Spearman ρ = {r:+.3} (n = {n} heads)"),
        None => format!("Spearman ρ undefined (n = {n} heads)"),
    }
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        (0.0, 1.0)
    } else if hi - lo < 1e-12 {
        (lo - 0.5, hi + 0.5)
    } else {
        let margin = 0.06 * (hi - lo);
        (lo - margin, hi + margin)
    }
}

impl Scatter {
    pub fn size(&self) -> (u32, u32) {
        (760, 560)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        area.draw_text(&rho_text(self.rho, self.n), &text_style(13.0, INK, HPos::Left, VPos::Top), (10, 30))?;
        let finite: Vec<&(String, f64, f64)> =
            self.points.iter().filter(|(_, x, y)| x.is_finite() && y.is_finite()).collect();
        let (x_lo, x_hi) = range(finite.iter().map(|p| p.1));
        let (y_lo, y_hi) = range(finite.iter().map(|p| p.2));
        let body = area.margin(52, 10, 10, 20);
        let mut chart = ChartBuilder::on(&body)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?;
        plain_mesh(chart.configure_mesh().x_desc(&self.x_name).y_desc(&self.y_name)).draw()?;
        let colour = RGBColor(33, 102, 172);
        chart.draw_series(finite.iter().map(|p| Circle::new((p.1, p.2), 5, colour.mix(0.75).filled())))?;
        chart.draw_series(finite.iter().map(|p| Circle::new((p.1, p.2), 5, INK.stroke_width(1))))?;
        let mut by_y = finite.clone();
        by_y.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let style = text_style(11.0, INK, HPos::Left, VPos::Center);
        chart.draw_series(
            by_y.iter()
                .take(self.named)
                .map(|p| EmptyElement::at((p.1, p.2)) + Text::new(p.0.clone(), (8, 0), style.clone())),
        )?;
        let left_out = self.points.len() - finite.len();
        if left_out > 0 {
            let (w, h) = area.dim_in_pixel();
            area.draw_text(
                &format!("{left_out} heads without a finite value not drawn"),
                &text_style(10.0, GREY, HPos::Right, VPos::Bottom),
                (w as i32 - 10, h as i32 - 4),
            )?;
        }
        Ok(())
    }
}
