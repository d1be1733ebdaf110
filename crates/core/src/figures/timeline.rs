//! Heads over training: one spectral feature and one behavioural score of some heads as lines
//! over a model's checkpoints (a log step axis when every revision names its step, else the
//! revisions in order), above the study's table over training.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{Area, DrawResult, GREY, INK, RULE, num, plain_mesh, text_style, title};
use crate::figures::svg::power_of_ten;
use crate::timeline::Timeline;

pub struct TimelineChart {
    pub title: String,
    pub timeline: Timeline,
    /// The heads drawn, (layer, head), each its own colour.
    pub heads: Vec<(usize, usize)>,
    /// Series names (`qk_imaginary_fraction`, `induction_score`).
    pub feature: String,
    pub score: String,
    /// Drawn as a dashed rule on the score's panel when the score is the induction score.
    pub threshold: Option<f64>,
}

const WIDTH: u32 = 900;
const PANEL: u32 = 250;
const ROW: u32 = 18;
/// Ten colours that stay apart (Tableau's), cycled past ten heads.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

impl TimelineChart {
    pub fn size(&self) -> (u32, u32) {
        (WIDTH, 44 + 2 * PANEL + 30 + ROW * (self.timeline.table.len() as u32 + 1) + 16)
    }

    /// Where each revision sits on the x axis, and whether that is log10(step + 1).
    fn positions(&self) -> (Vec<f64>, bool) {
        crate::timeline::positions(&self.timeline.revisions)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let body = area.margin(44, 0, 0, 0);
        let (panels, table) = body.split_vertically(2 * PANEL);
        let (upper, lower) = panels.split_vertically(PANEL);
        let (x, log) = self.positions();
        self.panel(&upper, &self.feature, &x, log, None)?;
        self.panel(&lower, &self.score, &x, log, self.threshold)?;
        self.table(&table.margin(22, 0, 10, 10))
    }

    /// One quantity's lines, a head each, named at its last point.
    fn panel<DB: DrawingBackend>(
        &self,
        area: &Area<DB>,
        quantity: &str,
        x: &[f64],
        log: bool,
        threshold: Option<f64>,
    ) -> DrawResult<DB> {
        // Each point with whether its revision repeats an earlier one's weights (drawn hollow).
        let repeated: Vec<bool> = self.timeline.revisions.iter().map(|r| r.same_weights_as.is_some()).collect();
        let marked: Vec<Vec<((f64, f64), bool)>> = self
            .heads
            .iter()
            .map(|&(layer, head)| {
                let series = self.timeline.series(layer, head, quantity).unwrap_or(&[]);
                x.iter()
                    .zip(series)
                    .zip(&repeated)
                    .filter_map(|((&x, v), &r)| v.filter(|v| v.is_finite()).map(|v| ((x, v), r)))
                    .collect()
            })
            .collect();
        let lines: Vec<Vec<(f64, f64)>> = marked.iter().map(|l| l.iter().map(|p| p.0).collect()).collect();
        let values = lines.iter().flatten().map(|p| p.1).chain(threshold);
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (lo, hi) = match (lo.is_finite(), hi - lo) {
            (false, _) => (0.0, 1.0),
            (true, span) if span < 1e-12 => (lo - 0.5, hi + 0.5),
            (true, span) => (lo - 0.06 * span, hi + 0.06 * span),
        };
        let x_hi = x.iter().copied().fold(0.0, f64::max).max(1.0);
        let (x_lo, x_end) = (-0.04 * x_hi, x_hi * 1.12);
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(60)
            .build_cartesian_2d(x_lo..x_end, lo..hi)?;
        let revisions = &self.timeline.revisions;
        let x_label = |v: &f64| -> String {
            if log {
                return String::new();
            }
            let index = v.round();
            match revisions.get(index as usize) {
                Some(r) if (v - index).abs() < 1e-9 && index >= 0.0 => short(&r.revision),
                _ => String::new(),
            }
        };
        plain_mesh(
            chart
                .configure_mesh()
                .x_desc(if log { "training step (log scale of step + 1)" } else { "revision" })
                .y_desc(quantity)
                .x_labels(if log { 0 } else { revisions.len().min(12) })
                .x_label_formatter(&x_label),
        )
        .draw()?;
        if log {
            // Ticks at step 0 and the powers of ten the steps reach.
            let top = x_hi.ceil() as i32;
            let ticks = std::iter::once((0.0, "0".to_string()))
                .chain((1..=top).map(|k| ((10f64.powi(k) + 1.0).log10(), power_of_ten(k))));
            let label = text_style(10.0, GREY, HPos::Center, VPos::Top);
            for (at, text) in ticks.filter(|(at, _)| *at <= x_end) {
                chart.draw_series(std::iter::once(PathElement::new(vec![(at, lo), (at, hi)], RULE.mix(0.5))))?;
                chart.draw_series(std::iter::once(
                    EmptyElement::at((at, lo)) + Text::new(text, (0, 4), label.clone()),
                ))?;
            }
        }
        if let Some(threshold) = threshold {
            let dashes =
                plotters::element::DashedPathElement::new(vec![(x_lo, threshold), (x_end, threshold)], 4, 4, GREY);
            chart.draw_series(std::iter::once(dashes))?;
        }
        let name_style = text_style(10.0, INK, HPos::Left, VPos::Center);
        for (i, (line, &(layer, head))) in lines.iter().zip(&self.heads).enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart.draw_series(LineSeries::new(line.iter().copied(), colour.stroke_width(2)))?;
            chart.draw_series(marked[i].iter().map(|&(p, repeated)| match repeated {
                true => Circle::new(p, 3, WHITE.filled()),
                false => Circle::new(p, 3, colour.filled()),
            }))?;
            chart.draw_series(
                marked[i].iter().filter(|m| m.1).map(|&(p, _)| Circle::new(p, 3, colour.stroke_width(1))),
            )?;
            if let Some(&last) = line.last() {
                let name = Text::new(format!("L{layer}H{head}"), (6, 0), name_style.clone());
                chart.draw_series(std::iter::once(EmptyElement::at(last) + name))?;
            }
        }
        Ok(())
    }

    /// The study's row per revision: its step, mean QK imaginary fraction, induction heads and
    /// prefix-copy accuracy, or why the revision has none.
    fn table<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        let columns = [10, 330, 420, 540, 660];
        let head = text_style(11.0, INK, HPos::Left, VPos::Top);
        let cell = text_style(11.0, GREY, HPos::Left, VPos::Top);
        let headings = ["revision", "step", "QK imag. (mean)", "induction heads", "prefix-copy acc."];
        for (x, text) in columns.iter().zip(headings) {
            area.draw_text(text, &head, (*x, 0))?;
        }
        for (i, (revision, row)) in self.timeline.revisions.iter().zip(&self.timeline.table).enumerate() {
            let y = ROW as i32 * (i as i32 + 1);
            let name = match &revision.same_weights_as {
                // Not fetched: its weights are the earlier revision's, and so are its numbers.
                Some(earlier) => format!("{} = {}", short(&revision.revision), short(earlier)),
                None => short(&revision.revision),
            };
            area.draw_text(&name, &cell, (columns[0], y))?;
            area.draw_text(&revision.step.map_or("-".into(), |s| s.to_string()), &cell, (columns[1], y))?;
            let texts = match (&row.row, &row.error) {
                (Some(row), _) => vec![
                    num(row.mean_qk_imaginary_fraction),
                    row.induction_heads.map_or("-".into(), |n| n.to_string()),
                    row.prefix_copy_accuracy.map_or("-".into(), num),
                ],
                (None, error) => {
                    let error = error.as_deref().unwrap_or("no row");
                    let clipped: String = error.chars().take(80).collect();
                    vec![format!("error: {clipped}{}", if clipped.len() < error.len() { "…" } else { "" })]
                }
            };
            for (x, text) in columns[2..].iter().zip(texts) {
                area.draw_text(&text, &cell, (*x, y))?;
            }
        }
        Ok(())
    }
}

/// A revision's name shortened to fit a label: a path's last part, at most 28 characters.
fn short(revision: &str) -> String {
    let last = revision.trim_end_matches('/').rsplit('/').next().unwrap_or(revision);
    let chars: Vec<char> = last.chars().collect();
    if chars.len() > 28 { format!("{}…", chars[..27].iter().collect::<String>()) } else { last.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_labels_and_short_names() {
        let labels: Vec<String> = (0..8).map(power_of_ten).collect();
        assert_eq!(labels, ["1", "10", "100", "1k", "10k", "100k", "1M", "10M"]);
        assert_eq!(short("checkpoints/step1000/"), "step1000");
        assert_eq!(short(&"a".repeat(40)).chars().count(), 28);
    }
}
