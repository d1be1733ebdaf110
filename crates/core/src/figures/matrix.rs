//! A matrix of coloured cells with row and column labels and a colour bar with its scale: the
//! attention heatmaps, the head grid and the OV logit matrix. [`Layout`] says where each cell
//! is (and which cell a point is in, for hover); [`draw_frame`] draws the labels and the colour
//! bar on any plotters backend; the cells are filled by the caller's fastest means:
//! [`draw_cells`] as rectangles for SVG and PNG files, one `putImageData` on the page's canvas.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::colour::Scale;
use super::{Area, DrawResult, GREY, INK, RULE, num, text_style, upward_text_style};

/// Room for the colour bar, its ticks and its title, right of the cells.
pub const BAR_SPACE: f64 = 78.0;
/// From the colour bar's top to its title's bottom: the top tick label is 10 px text centred
/// on the bar's top, so this leaves 4 px between them. A chart keeps `BAR_TITLE_GAP` + 10 px
/// above its cells.
pub const BAR_TITLE_GAP: f64 = 9.0;

/// Where the cells are, in the drawing area's pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Layout {
    pub x: f64,
    pub y: f64,
    pub cell_w: f64,
    pub cell_h: f64,
    pub rows: usize,
    pub cols: usize,
}

impl Layout {
    /// Cells of `cell` px (square) from (`x`, `y`).
    pub fn new(x: f64, y: f64, cell: f64, rows: usize, cols: usize) -> Layout {
        Layout { x, y, cell_w: cell, cell_h: cell, rows, cols }
    }

    pub fn width(&self) -> f64 {
        self.cell_w * self.cols as f64
    }

    pub fn height(&self) -> f64 {
        self.cell_h * self.rows as f64
    }

    /// Cell (`row`, `col`)'s pixel rectangle, [x0, x1) x [y0, y1): neighbours share edges, so
    /// the cells tile the block with no gap at any cell size.
    pub fn cell(&self, row: usize, col: usize) -> (i32, i32, i32, i32) {
        let x = |c: usize| (self.x + c as f64 * self.cell_w).round() as i32;
        let y = |r: usize| (self.y + r as f64 * self.cell_h).round() as i32;
        (x(col), y(row), x(col + 1), y(row + 1))
    }

    /// The cell under a point (hover), if any.
    pub fn cell_at(&self, px: f64, py: f64) -> Option<(usize, usize)> {
        let (c, r) = ((px - self.x) / self.cell_w, (py - self.y) / self.cell_h);
        (c >= 0.0 && r >= 0.0 && (c as usize) < self.cols && (r as usize) < self.rows)
            .then_some((r as usize, c as usize))
    }
}

/// Labels of rows and columns (all of them, or none: index ticks are drawn instead) and the
/// axis names.
pub struct Labels<'a> {
    pub rows: &'a [String],
    pub cols: &'a [String],
    pub row_axis: &'a str,
    pub col_axis: &'a str,
}

/// Every `step`-th index, with `step` a 1-2-5 number keeping ticks `min_px` apart.
fn tick_step(cell: f64, min_px: f64) -> usize {
    let mut step = 1;
    for factor in [2, 5, 10].iter().cycle() {
        if step as f64 * cell >= min_px {
            break;
        }
        step = match factor {
            2 => step * 2,
            5 => step / 2 * 5,
            _ => step * 2,
        };
    }
    step.max(1)
}

/// Row and column labels left of and above the cells, and the colour bar right of them.
pub fn draw_frame<DB: DrawingBackend>(
    area: &Area<DB>,
    layout: &Layout,
    labels: &Labels,
    scale: &Scale,
) -> DrawResult<DB> {
    let (x0, y0) = (layout.x, layout.y);
    let (x1, y1) = (x0 + layout.width(), y0 + layout.height());
    let row_font = (layout.cell_h * 0.75).clamp(6.0, 12.0);
    let col_font = (layout.cell_w * 0.75).clamp(6.0, 12.0);
    // Row labels: every one when they fit, else index ticks.
    if labels.rows.len() == layout.rows && layout.cell_h >= 7.0 {
        for (r, label) in labels.rows.iter().enumerate() {
            let y = y0 + (r as f64 + 0.5) * layout.cell_h;
            area.draw_text(
                label,
                &text_style(row_font, INK, HPos::Right, VPos::Center),
                ((x0 - 4.0) as i32, y as i32),
            )?;
        }
    } else {
        let step = tick_step(layout.cell_h, 16.0);
        for r in (0..layout.rows).step_by(step) {
            let y = y0 + (r as f64 + 0.5) * layout.cell_h;
            area.draw(&PathElement::new(vec![((x0 - 3.0) as i32, y as i32), (x0 as i32, y as i32)], GREY))?;
            area.draw_text(
                &r.to_string(),
                &text_style(10.0, GREY, HPos::Right, VPos::Center),
                ((x0 - 5.0) as i32, y as i32),
            )?;
        }
    }
    if labels.cols.len() == layout.cols && layout.cell_w >= 7.0 {
        for (c, label) in labels.cols.iter().enumerate() {
            let x = x0 + (c as f64 + 0.5) * layout.cell_w;
            area.draw_text(
                label,
                &upward_text_style(col_font, INK, HPos::Left, VPos::Center),
                (x as i32, (y0 - 4.0) as i32),
            )?;
        }
    } else {
        let step = tick_step(layout.cell_w, 24.0);
        for c in (0..layout.cols).step_by(step) {
            let x = x0 + (c as f64 + 0.5) * layout.cell_w;
            area.draw(&PathElement::new(vec![(x as i32, (y0 - 3.0) as i32), (x as i32, y0 as i32)], GREY))?;
            area.draw_text(
                &c.to_string(),
                &text_style(10.0, GREY, HPos::Center, VPos::Bottom),
                (x as i32, (y0 - 5.0) as i32),
            )?;
        }
    }
    if !labels.row_axis.is_empty() {
        area.draw_text(
            labels.row_axis,
            &upward_text_style(11.0, GREY, HPos::Center, VPos::Top),
            (4, ((y0 + y1) / 2.0) as i32),
        )?;
    }
    if !labels.col_axis.is_empty() {
        area.draw_text(
            labels.col_axis,
            &text_style(11.0, GREY, HPos::Left, VPos::Bottom),
            ((x1 + 6.0) as i32, (y0 - 4.0) as i32),
        )?;
    }
    area.draw(&Rectangle::new([(x0 as i32 - 1, y0 as i32 - 1), (x1 as i32, y1 as i32)], RULE))?;
    colour_bar(area, x1 + 16.0, y0, layout.height().clamp(90.0, 260.0), scale)
}

/// A vertical colour bar at (`x`, `y`), `height` px tall: the scale's colours from `hi` (top) to
/// `lo`, with the ends and the middle labelled and the scale's name above, clear of the top
/// label.
pub fn colour_bar<DB: DrawingBackend>(area: &Area<DB>, x: f64, y: f64, height: f64, scale: &Scale) -> DrawResult<DB> {
    const STEPS: usize = 64;
    let width = 12.0;
    let step_h = height / STEPS as f64;
    for i in 0..STEPS {
        // From the top: the highest value first.
        let t = 1.0 - (i as f64 + 0.5) / STEPS as f64;
        let v = scale.lo + t * (scale.hi - scale.lo);
        let top = (y + i as f64 * step_h).round() as i32;
        let bottom = (y + (i + 1) as f64 * step_h).round() as i32;
        area.draw(&Rectangle::new([(x as i32, top), ((x + width) as i32, bottom)], scale.colour(v).filled()))?;
    }
    area.draw(&Rectangle::new([(x as i32, y as i32), ((x + width) as i32, (y + height) as i32)], GREY))?;
    for (t, v) in [(0.0, scale.hi), (0.5, (scale.lo + scale.hi) / 2.0), (1.0, scale.lo)] {
        let ty = (y + t * height) as i32;
        area.draw(&PathElement::new(vec![((x + width) as i32, ty), ((x + width + 3.0) as i32, ty)], GREY))?;
        area.draw_text(&num(v), &text_style(10.0, INK, HPos::Left, VPos::Center), ((x + width + 5.0) as i32, ty))?;
    }
    // The title's baseline clear of the top tick label (10 px text centred on `y`).
    area.draw_text(
        &scale.label,
        &text_style(10.0, GREY, HPos::Left, VPos::Bottom),
        (x as i32, (y - BAR_TITLE_GAP) as i32),
    )
}

/// Fills every cell whose value is known (`value` returns None for a cell left blank, such as
/// the masked future of an attention pattern) as a rectangle in its scale colour.
pub fn draw_cells<DB: DrawingBackend>(
    area: &Area<DB>,
    layout: &Layout,
    scale: &Scale,
    value: impl Fn(usize, usize) -> Option<f64>,
) -> DrawResult<DB> {
    fill_cells(area, layout, |r, c| value(r, c).map(|v| scale.colour(v)))
}

/// Fills every cell that has a colour (None: left blank) as a rectangle: [`draw_cells`], and
/// the page's canvas views when exported as SVG (their cells carry colours of their own, e.g. a
/// head whose circuit could not be read).
pub fn fill_cells<DB: DrawingBackend>(
    area: &Area<DB>,
    layout: &Layout,
    colour: impl Fn(usize, usize) -> Option<RGBColor>,
) -> DrawResult<DB> {
    for r in 0..layout.rows {
        for c in 0..layout.cols {
            if let Some(fill) = colour(r, c) {
                let (x0, y0, x1, y1) = layout.cell(r, c);
                area.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))?;
            }
        }
    }
    Ok(())
}

/// The cell block as RGBA pixels at `factor` device pixels per layout pixel: the page's canvas
/// puts this once as an `ImageData` (one call, instead of a draw call a cell). A device pixel
/// belongs to the cell [`Layout::cell_at`] finds at its centre; `colour` None is left white.
/// Each of `marks` is outlined just inside its cell in `mark`, as [`outline`] draws it (2 px
/// wide for cells of 8 px or more, else 1), in the pixels themselves: thousands of outlines drawn
/// one `strokeRect` each would make a long frame. Returns (width, height, pixels).
pub fn cell_pixels(
    layout: &Layout,
    factor: f64,
    colour: impl Fn(usize, usize) -> Option<[u8; 3]>,
    marks: &[(usize, usize)],
    mark: [u8; 3],
) -> (usize, usize, Vec<u8>) {
    let (rows, cols) = (layout.rows, layout.cols);
    let w = (layout.width() * factor).round() as usize;
    let h = (layout.height() * factor).round() as usize;
    if rows == 0 || cols == 0 || w == 0 || h == 0 {
        return (w, h, vec![255; w * h * 4]);
    }
    // The cell of each device column and row, and where each cell starts (cells are runs).
    let index = |px: usize, cell: f64, n: usize| ((((px as f64 + 0.5) / factor) / cell) as usize).min(n - 1);
    let col_of: Vec<usize> = (0..w).map(|px| index(px, layout.cell_w, cols)).collect();
    let row_of: Vec<usize> = (0..h).map(|py| index(py, layout.cell_h, rows)).collect();
    let starts = |of: &[usize], n: usize| {
        let mut start = vec![of.len(); n + 1];
        for (px, &c) in of.iter().enumerate().rev() {
            start[c] = px;
        }
        // A cell narrower than a device pixel may own none: it starts where the next one does.
        for c in (0..n).rev() {
            start[c] = start[c].min(start[c + 1]);
        }
        start
    };
    let (col_start, row_start) = (starts(&col_of, cols), starts(&row_of, rows));
    let mut pixels = vec![0u8; w * h * 4];
    let line = w * 4;
    let mut py = 0;
    while py < h {
        let r = row_of[py];
        let first = py * line;
        for (pixel, &c) in pixels[first..first + line].chunks_exact_mut(4).zip(&col_of) {
            let [red, green, blue] = colour(r, c).unwrap_or([255, 255, 255]);
            pixel.copy_from_slice(&[red, green, blue, 255]);
        }
        // The cell row's other device rows are copies of its first.
        let mut next = py + 1;
        while next < h && row_of[next] == r {
            pixels.copy_within(first..first + line, next * line);
            next += 1;
        }
        py = next;
    }
    let [red, green, blue] = mark;
    let thick = |cell: f64| ((if cell >= 8.0 { 2.0 } else { 1.0 }) * factor).round().max(1.0) as usize;
    let (tx, ty) = (thick(layout.cell_w), thick(layout.cell_h));
    for &(r, c) in marks.iter().filter(|&&(r, c)| r < rows && c < cols) {
        let (x0, x1, y0, y1) = (col_start[c], col_start[c + 1], row_start[r], row_start[r + 1]);
        for y in y0..y1 {
            let edge = y < y0 + ty || y + ty >= y1;
            let row = &mut pixels[y * line..(y + 1) * line];
            for x in x0..x1 {
                if edge || x < x0 + tx || x + tx >= x1 {
                    row[x * 4..x * 4 + 3].copy_from_slice(&[red, green, blue]);
                }
            }
        }
    }
    (w, h, pixels)
}

/// An outline just inside cell (`row`, `col`).
pub fn outline<DB: DrawingBackend>(
    area: &Area<DB>,
    layout: &Layout,
    row: usize,
    col: usize,
    colour: RGBColor,
) -> DrawResult<DB> {
    let (x0, y0, x1, y1) = layout.cell(row, col);
    let width = if x1 - x0 >= 8 { 2 } else { 1 };
    area.draw(&Rectangle::new([(x0, y0), (x1 - 1, y1 - 1)], colour.stroke_width(width)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_tile_and_hover_finds_them() {
        let layout = Layout::new(10.0, 20.0, 2.5, 4, 6);
        for r in 0..4 {
            for c in 0..6 {
                let (x0, y0, x1, y1) = layout.cell(r, c);
                assert_eq!(layout.cell_at(x0 as f64 + 0.5, y0 as f64 + 0.5), Some((r, c)));
                if c + 1 < 6 {
                    assert_eq!(layout.cell(r, c + 1).0, x1);
                }
                if r + 1 < 4 {
                    assert_eq!(layout.cell(r + 1, c).1, y1);
                }
            }
        }
        assert_eq!(layout.cell_at(9.9, 21.0), None);
        assert_eq!(layout.cell_at(10.0 + 15.0, 21.0), None);
        assert_eq!(layout.cell_at(11.0, 20.0 + 10.0), None);
    }

    /// The pixels give every cell its colour where `cell_at` finds it, blank cells white, and
    /// the marked cell an outline of the right width with its colour inside.
    #[test]
    fn pixels_follow_the_layout_and_outline_marks() {
        let colour = |r: usize, c: usize| (r != c).then_some([r as u8 * 10, c as u8 * 10, 7]);
        let mark = [255, 45, 138];
        for (cell, factor) in [(1.25, 1.0), (1.25, 2.0), (9.0, 1.0), (9.0, 2.0), (3.0, 1.5), (0.5, 1.0)] {
            let layout = Layout::new(0.0, 0.0, cell, 7, 9);
            let (w, h, pixels) = cell_pixels(&layout, factor, colour, &[(2, 5)], mark);
            assert_eq!((w, h), ((9.0 * cell * factor).round() as usize, (7.0 * cell * factor).round() as usize));
            assert_eq!(pixels.len(), w * h * 4);
            // The cell under a device pixel's centre (the last one past the block's rounded edge).
            let owner = |x: usize, y: usize| {
                let (px, py) = ((x as f64 + 0.5) / factor, (y as f64 + 0.5) / factor);
                layout.cell_at(px.min(layout.width() - 1e-9), py.min(layout.height() - 1e-9)).unwrap()
            };
            // The marked cell's device pixels, found by scanning.
            let xs: Vec<usize> = (0..w).filter(|&x| (0..h).any(|y| owner(x, y).1 == 5)).collect();
            let ys: Vec<usize> = (0..h).filter(|&y| (0..w).any(|x| owner(x, y).0 == 2)).collect();
            let width = ((if cell >= 8.0 { 2.0 } else { 1.0 }) * factor).round() as usize;
            let in_outline = |x: usize, y: usize| {
                let (x0, x1) = (xs[0], xs[xs.len() - 1]);
                let (y0, y1) = (ys[0], ys[ys.len() - 1]);
                x < x0 + width || x + width > x1 || y < y0 + width || y + width > y1
            };
            for y in 0..h {
                for x in 0..w {
                    let (r, c) = owner(x, y);
                    let [red, green, blue] = if (r, c) == (2, 5) && in_outline(x, y) {
                        mark
                    } else {
                        colour(r, c).unwrap_or([255, 255, 255])
                    };
                    let at = (y * w + x) * 4;
                    assert_eq!(pixels[at..at + 4], [red, green, blue, 255], "cell {cell} x{factor}: pixel ({x}, {y})");
                }
            }
            // The outline is there (when the cell owns pixels at all) and not everywhere.
            let marked = pixels.chunks_exact(4).filter(|p| p[..3] == mark).count();
            if !xs.is_empty() && !ys.is_empty() {
                assert!(marked > 0 && marked <= xs.len() * ys.len());
            }
        }
    }

    #[test]
    fn ticks_keep_apart() {
        assert_eq!(tick_step(20.0, 16.0), 1);
        assert_eq!(tick_step(1.0, 16.0), 20);
        assert_eq!(tick_step(0.5, 24.0), 50);
    }
}
