//! The character-transformer case study's Figure 3: each swap pair's two prompts side by side, the
//! head's attention pattern on each with the induction cells (the key after the query token's most
//! recent earlier occurrence) outlined.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::attention::Pattern;
use super::matrix::BAR_SPACE;
use super::{Area, DrawResult, INK, text_style, title, token_label};

pub struct Prompt {
    pub id: String,
    pub text: String,
    pub tokens: Vec<String>,
    pub rows: Vec<Vec<f64>>,
    pub marks: Vec<(usize, usize)>,
}

pub struct Swap {
    pub title: String,
    /// In pairs: A then B of each pair, one pair per row of the figure.
    pub prompts: Vec<Prompt>,
}

/// Room for the token labels left of and above each heatmap.
const LABELS: f64 = 24.0;
const PANEL: f64 = 460.0;

impl Swap {
    fn cell(&self) -> f64 {
        let longest = self.prompts.iter().map(|p| p.tokens.len()).max().unwrap_or(1).max(1);
        ((PANEL - LABELS - BAR_SPACE - 10.0) / longest as f64).clamp(4.0, 16.0)
    }

    fn panel_height(&self) -> f64 {
        let longest = self.prompts.iter().map(|p| p.tokens.len()).max().unwrap_or(1);
        60.0 + LABELS + self.cell() * longest as f64
    }

    pub fn size(&self) -> (u32, u32) {
        let rows = self.prompts.len().div_ceil(2).max(1);
        ((2.0 * PANEL) as u32, (40.0 + rows as f64 * self.panel_height()) as u32)
    }

    pub fn draw<DB: DrawingBackend>(&self, area: &Area<DB>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        title(area, &self.title)?;
        let cell = self.cell();
        for (i, prompt) in self.prompts.iter().enumerate() {
            let (x, y) = ((i % 2) as f64 * PANEL, 40.0 + (i / 2) as f64 * self.panel_height());
            let caption = format!("{}: {}", prompt.id, token_label(&prompt.text));
            area.draw_text(&caption, &text_style(12.0, INK, HPos::Left, VPos::Top), ((x + 10.0) as i32, y as i32))?;
            let pattern = Pattern { tokens: &prompt.tokens, rows: &prompt.rows, marks: &prompt.marks };
            let layout = pattern.layout(x + 10.0 + LABELS, y + 36.0 + LABELS, cell);
            pattern.draw(area, &layout, true)?;
        }
        Ok(())
    }
}
