//! A head's eigenvalue planes: each circuit's eigenvalues in the complex plane beside the unit
//! circle, with the circuit's copying score, imaginary fraction and κ under it.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{Area, DrawResult, FONT, GREY, INK, RULE, text_style, title};
use crate::analysis::Eigenvalue;

pub struct Plane {
    /// The circuit's name, e.g. `OV (W_E W_V W_O W_U)`.
    pub name: String,
    pub eigenvalues: Vec<Eigenvalue>,
    /// One line of metrics under the plane.
    pub note: String,
    pub colour: RGBColor,
}

pub struct Spectra {
    pub title: String,
    pub planes: Vec<Plane>,
}

const PANEL: u32 = 440;

impl Spectra {
    pub fn size(&self) -> (u32, u32) {
        (PANEL * self.planes.len().max(1) as u32 + 20, PANEL + 60)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let body = area.margin(34, 6, 10, 10);
        let panels = body.split_evenly((1, self.planes.len().max(1)));
        for (plane, panel) in self.planes.iter().zip(&panels) {
            let (w, h) = panel.dim_in_pixel();
            let (chart, note) = panel.split_vertically(h.saturating_sub(22));
            draw_plane(&chart, plane)?;
            note.draw_text(&plane.note, &text_style(11.0, INK, HPos::Center, VPos::Top), (w as i32 / 2, 4))?;
        }
        Ok(())
    }
}

fn draw_plane<DB: DrawingBackend>(area: &Area<DB>, plane: &Plane) -> DrawResult<DB> {
    let finite: Vec<&Eigenvalue> = plane.eigenvalues.iter().filter(|l| l.re.is_finite() && l.im.is_finite()).collect();
    let max_abs = finite.iter().map(|l| l.abs()).fold(0.0, f64::max);
    // The unit circle stays in view unless the eigenvalues are far larger.
    let range = (max_abs * 1.1).max(1.15);
    let mut chart = ChartBuilder::on(area)
        .caption(&plane.name, (FONT, 13).into_font().color(&INK))
        .margin(6)
        .x_label_area_size(34)
        .y_label_area_size(44)
        .build_cartesian_2d(-range..range, -range..range)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(5)
        .y_labels(5)
        .x_desc("Re λ")
        .y_desc("Im λ")
        .label_style((FONT, 10).into_font().color(&GREY))
        .axis_desc_style((FONT, 11).into_font().color(&GREY))
        .axis_style(GREY)
        .draw()?;
    chart.draw_series(LineSeries::new([(-range, 0.0), (range, 0.0)], RULE))?;
    chart.draw_series(LineSeries::new([(0.0, -range), (0.0, range)], RULE))?;
    let circle = (0..=180).map(|i| {
        let a = i as f64 / 180.0 * std::f64::consts::TAU;
        (a.cos(), a.sin())
    });
    chart.draw_series(LineSeries::new(circle, GREY))?;
    chart.draw_series(finite.iter().map(|l| Circle::new((l.re, l.im), 4, plane.colour.mix(0.8).filled())))?;
    chart.draw_series(finite.iter().map(|l| Circle::new((l.re, l.im), 4, INK.stroke_width(1))))?;
    Ok(())
}
