//! Colour maps (colour-blind safe) and charts drawn as inline SVG strings. Every mark
//! carries a `<title>` with its exact value, shown on hover. The colour maps themselves are
//! `crate::figures::colour`'s, shared with the canvas views and the CLI's figures.

use std::fmt::Write;

use crate::analysis::Eigenvalue;

use crate::figures::colour;
/// Numbers and tokens read the same in every chart.
pub use crate::figures::{num, visible};

fn css(rgb: [f64; 3]) -> String {
    let [r, g, b] = colour::bytes(rgb);
    format!("rgb({r},{g},{b})")
}

/// A colour and a text colour readable on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Swatch {
    pub fill: String,
    pub ink: &'static str,
}

fn swatch(rgb: [f64; 3]) -> Swatch {
    Swatch { fill: css(rgb), ink: if colour::dark_ink(rgb) { "#111" } else { "#fff" } }
}

/// Sequential: t in [0, 1].
pub fn viridis(t: f64) -> Swatch {
    swatch(colour::viridis(t))
}

/// Diverging: v in [-1, 1], 0 is white.
pub fn diverging(v: f64) -> Swatch {
    swatch(colour::diverging(v))
}

/// Escapes text for SVG/XML. Characters XML 1.0 forbids (controls, U+FFFE, U+FFFF) become
/// U+FFFD, so a token from a file cannot make the chart ill-formed.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Like [`num`] with a sign.
pub fn signed(v: f64) -> String {
    if v >= 0.0 { format!("+{}", num(v)) } else { num(v) }
}

/// One bar of a bar chart.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub fill: String,
    pub head: String,
    pub selected: bool,
}

/// Bars in order, grouped by `group` (layers): a value axis from `lo` to `hi`.
pub fn bar_chart(bars: &[Bar], group: usize, lo: f64, hi: f64, title: &str) -> String {
    let n = bars.len().max(1);
    let (left, top, height) = (44.0, 14.0, 180.0);
    let bar_w = (1000.0 / n as f64).clamp(3.0, 26.0);
    let width = left + bar_w * n as f64 + 10.0;
    let span = if hi > lo { hi - lo } else { 1.0 };
    let y = |v: f64| top + height * (1.0 - ((v.clamp(lo, hi) - lo) / span));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="bars" viewBox="0 0 {width:.0} {h:.0}" width="{width:.0}" height="{h:.0}" role="img" aria-label="{t}">"#,
        h = top + height + 34.0,
        t = esc(title)
    );
    for tick in [lo, (lo + hi) / 2.0, hi] {
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{x2:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ccc" stroke-width="0.5"/><text x="{tx}" y="{ty:.1}" font-size="10" text-anchor="end" fill="#444">{v}</text>"##,
            x2 = width - 10.0,
            yy = y(tick),
            tx = left - 4.0,
            ty = y(tick) + 3.0,
            v = esc(&num(tick))
        );
    }
    let base = y(0.0_f64.clamp(lo, hi));
    for (i, bar) in bars.iter().enumerate() {
        let x = left + bar_w * i as f64;
        let v = if bar.value.is_finite() { bar.value } else { hi };
        let (y0, y1) = if y(v) < base { (y(v), base) } else { (base, y(v)) };
        let stroke = if bar.selected { r##" stroke="#000" stroke-width="1.5""## } else { "" };
        let _ = write!(
            s,
            r#"<rect data-head="{head}" x="{x:.1}" y="{y0:.1}" width="{w:.1}" height="{hh:.1}" fill="{fill}"{stroke}><title>{label}</title></rect>"#,
            head = esc(&bar.head),
            w = (bar_w - 1.0).max(1.0),
            hh = (y1 - y0).max(0.5),
            fill = bar.fill,
            label = esc(&bar.label)
        );
        if group > 0 && i % group == 0 {
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{yb:.1}" stroke="#999" stroke-width="0.5"/><text x="{x:.1}" y="{ty:.1}" font-size="10" fill="#444">L{layer}</text>"##,
                yb = top + height + 4.0,
                ty = top + height + 16.0,
                layer = i / group
            );
        }
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{x2:.1}" y1="{base:.1}" y2="{base:.1}" stroke="#333" stroke-width="0.8"/></svg>"##,
        x2 = width - 10.0
    );
    s
}

/// Eigenvalues in the complex plane with the unit circle.
/// `fit`: zoom to the eigenvalues (the unit circle may then lie outside the plot).
pub fn complex_plane(eigenvalues: &[Eigenvalue], colour: &str, fit: bool, title: &str) -> String {
    let size = 300.0;
    let pad = 26.0;
    let max_abs = eigenvalues.iter().map(|l| l.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let range = if fit && max_abs > 0.0 { max_abs * 1.1 } else { (max_abs * 1.1).max(1.15) };
    let scale = (size / 2.0 - pad) / range;
    let c = size / 2.0;
    let px = |re: f64| c + re * scale;
    let py = |im: f64| c - im * scale;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg class="plane" viewBox="0 0 {size} {size}" width="{size}" height="{size}" role="img" aria-label="{t}"><rect x="0" y="0" width="{size}" height="{size}" fill="#fcfcfc" stroke="#ddd"/>"##,
        t = esc(title)
    );
    let _ = write!(
        s,
        r##"<line x1="{pad}" x2="{e}" y1="{c}" y2="{c}" stroke="#aaa"/><line x1="{c}" x2="{c}" y1="{pad}" y2="{e}" stroke="#aaa"/><text x="{e}" y="{ty}" font-size="10" text-anchor="end" fill="#555">Re</text><text x="{tx}" y="{tp}" font-size="10" fill="#555">Im</text>"##,
        e = size - pad,
        ty = c - 4.0,
        tx = c + 4.0,
        tp = pad + 8.0
    );
    let _ = write!(
        s,
        r##"<circle cx="{c}" cy="{c}" r="{r:.2}" fill="none" stroke="#888" stroke-dasharray="4 3"><title>unit circle |λ| = 1</title></circle>"##,
        r = scale
    );
    let _ = write!(
        s,
        r##"<text x="{x:.1}" y="{y:.1}" font-size="10" fill="#555">±{v}</text>"##,
        x = px(range) - 30.0,
        y = c + 14.0,
        v = esc(&num(range))
    );
    for (i, l) in eigenvalues.iter().enumerate() {
        if !(l.re.is_finite() && l.im.is_finite()) {
            continue;
        }
        let _ = write!(
            s,
            r##"<circle class="eig" cx="{x:.2}" cy="{y:.2}" r="4.5" fill="{colour}" fill-opacity="0.8" stroke="#222" stroke-width="0.6"><title>λ{n} = {re} {sign} {im}i   |λ| = {abs}</title></circle>"##,
            x = px(l.re),
            y = py(l.im),
            n = i + 1,
            re = num(l.re),
            sign = if l.im < 0.0 { "−" } else { "+" },
            im = num(l.im.abs()),
            abs = num(l.abs())
        );
    }
    s.push_str("</svg>");
    s
}

/// A heatmap's cell size, label margin, total size and font size for `n` tokens in about
/// `max_px` pixels.
fn heatmap_geometry(n: usize, max_px: f64) -> (f64, f64, f64, f64) {
    let cell = (max_px / n.max(1) as f64).clamp(4.0, 22.0);
    let label = 56.0;
    (cell, label, label + cell * n as f64 + 4.0, (cell * 0.7).clamp(6.0, 12.0))
}

/// Query labels down the left, key labels along the top (when cells are big enough to read).
fn axis_labels(s: &mut String, tokens: &[String], cell: f64, label: f64, font: f64) {
    if cell < 7.0 {
        return;
    }
    for (i, token) in tokens.iter().enumerate() {
        let text = esc(&visible(token));
        let mid = label + cell * (i as f64 + 0.5);
        let _ = write!(
            s,
            r##"<text x="{x:.1}" y="{y:.1}" font-size="{font:.1}" text-anchor="end" fill="#333" font-family="monospace">{text}<title>query {i}: {text}</title></text>"##,
            x = label - 3.0,
            y = mid + font * 0.35
        );
        let _ = write!(
            s,
            r##"<text x="{x:.1}" y="{y:.1}" font-size="{font:.1}" text-anchor="start" fill="#333" font-family="monospace" transform="rotate(-90 {x:.1} {y:.1})">{text}<title>key {i}: {text}</title></text>"##,
            x = mid + font * 0.35,
            y = label - 3.0
        );
    }
}

/// The grid of a heatmap with no weights shown, for predicting before the reveal: the keys
/// `query` may attend to (0..=query) are buttons, `data-query`/`data-key` name each (the page's
/// click and key handlers read them), focusable and labelled for keyboards and screen readers.
pub fn key_picker(tokens: &[String], query: usize, max_px: f64, title: &str) -> String {
    let n = tokens.len();
    let (cell, label, size, font) = heatmap_geometry(n, max_px);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="heatmap key-picker" viewBox="0 0 {size:.0} {size:.0}" width="{size:.0}" height="{size:.0}" role="group" aria-label="{t}">"#,
        t = esc(title)
    );
    axis_labels(&mut s, tokens, cell, label, font);
    for q in 0..n {
        for (k, key_token) in tokens.iter().enumerate().take(q + 1) {
            let (x, y) = (label + cell * k as f64, label + cell * q as f64);
            if q == query {
                let token = esc(&visible(key_token));
                let _ = write!(
                    s,
                    r##"<rect class="key-choice" data-query="{q}" data-key="{k}" tabindex="0" role="button" aria-label="key {k}: {token}" x="{x:.1}" y="{y:.1}" width="{c:.2}" height="{c:.2}" fill="#fff" stroke="#222" stroke-width="1"><title>choose key {k} {token}</title></rect>"##,
                    c = cell
                );
            } else {
                let _ = write!(
                    s,
                    r##"<rect x="{x:.1}" y="{y:.1}" width="{c:.2}" height="{c:.2}" fill="#eee" stroke="#fff" stroke-width="0.5"/>"##,
                    c = cell
                );
            }
        }
    }
    s.push_str("</svg>");
    s
}

/// An attention pattern (query rows x key columns) with token labels; `marks` are
/// (query, key) cells outlined (induction cells), `highlight_row` a query row to box.
pub fn heatmap(
    pattern: &[Vec<f64>],
    tokens: &[String],
    marks: &[(usize, usize)],
    highlight_row: Option<usize>,
    max_px: f64,
    title: &str,
) -> String {
    let n = tokens.len();
    let (cell, label, size, font) = heatmap_geometry(n, max_px);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="heatmap" viewBox="0 0 {size:.0} {size:.0}" width="{size:.0}" height="{size:.0}" role="img" aria-label="{t}">"#,
        t = esc(title)
    );
    axis_labels(&mut s, tokens, cell, label, font);
    for (q, row) in pattern.iter().enumerate() {
        for (k, &w) in row.iter().enumerate().take(q + 1) {
            let x = label + cell * k as f64;
            let y = label + cell * q as f64;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{c:.2}" height="{c:.2}" fill="{fill}"><title>query {q} {qt} → key {k} {kt}: {w:.4}</title></rect>"#,
                c = cell,
                fill = viridis(w).fill,
                qt = esc(&visible(tokens.get(q).map_or("", String::as_str))),
                kt = esc(&visible(tokens.get(k).map_or("", String::as_str))),
            );
        }
    }
    for &(q, k) in marks {
        let _ = write!(
            s,
            r##"<rect class="induction-cell" x="{x:.1}" y="{y:.1}" width="{c:.2}" height="{c:.2}" fill="none" stroke="#ff2d8a" stroke-width="{sw:.1}"><title>induction cell: query {q} → key {k}</title></rect>"##,
            x = label + cell * k as f64 + 0.5,
            y = label + cell * q as f64 + 0.5,
            c = cell - 1.0,
            sw = (cell / 8.0).clamp(1.0, 2.0)
        );
    }
    if let Some(q) = highlight_row {
        let _ = write!(
            s,
            r##"<rect x="{label}" y="{y:.1}" width="{w:.1}" height="{c:.2}" fill="none" stroke="#000" stroke-width="1.5"/>"##,
            y = label + cell * q as f64,
            w = cell * n as f64,
            c = cell
        );
    }
    s.push_str("</svg>");
    s
}

/// A horizontal colour bar legend. `id` names its gradient, unique on the page: two legends
/// sharing one would both draw the first one's colours.
pub fn legend(id: &str, stops: &[(f64, String)], lo: &str, hi: &str) -> String {
    let mut s = format!(
        r#"<svg class="legend" viewBox="0 0 240 30" width="240" height="30" role="img" aria-label="colour scale"><defs><linearGradient id="{id}">"#,
        id = esc(id)
    );
    for (offset, colour) in stops {
        let _ = write!(s, r#"<stop offset="{:.3}" stop-color="{colour}"/>"#, offset);
    }
    let _ = write!(
        s,
        r##"</linearGradient></defs><rect x="0" y="0" width="240" height="12" fill="url(#{id})" stroke="#999" stroke-width="0.5"/><text x="0" y="26" font-size="11" fill="#333">{lo}</text><text x="240" y="26" font-size="11" text-anchor="end" fill="#333">{hi}</text></svg>"##,
        id = esc(id),
        lo = esc(lo),
        hi = esc(hi)
    );
    s
}

/// The attention heatmaps' colour bar: weight 0 to 1 on the colour map `heatmap` fills with.
pub fn attention_legend(id: &str) -> String {
    let stops: Vec<(f64, String)> = (0..=10).map(|i| i as f64 / 10.0).map(|t| (t, viridis(t).fill)).collect();
    legend(id, &stops, "attention 0", "1 (all of the query's attention)")
}

/// One point of a scatter plot.
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// Hover text (head name and both values).
    pub label: String,
    pub head: String,
    pub highlighted: bool,
}

/// A scatter plot of finite points with axes, tick values at the ends and axis names.
pub fn scatter(points: &[Point], x_name: &str, y_name: &str, title: &str) -> String {
    let (width, height, pad) = (520.0, 360.0, 48.0);
    let finite: Vec<&Point> = points.iter().filter(|p| p.x.is_finite() && p.y.is_finite()).collect();
    let range = |values: Vec<f64>| {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            (0.0, 1.0)
        } else if hi - lo < 1e-12 {
            (lo - 0.5, hi + 0.5)
        } else {
            let margin = 0.05 * (hi - lo);
            (lo - margin, hi + margin)
        }
    };
    let (x_lo, x_hi) = range(finite.iter().map(|p| p.x).collect());
    let (y_lo, y_hi) = range(finite.iter().map(|p| p.y).collect());
    let px = |x: f64| pad + (x - x_lo) / (x_hi - x_lo) * (width - 2.0 * pad);
    let py = |y: f64| height - pad - (y - y_lo) / (y_hi - y_lo) * (height - 2.0 * pad);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg class="scatter" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{t}"><rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>"##,
        t = esc(title)
    );
    let (left, right, top, bottom) = (pad, width - pad, pad, height - pad);
    let _ = write!(
        s,
        r##"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fcfcfc" stroke="#ccc"/>"##,
        w = right - left,
        h = bottom - top
    );
    for (value, x, anchor) in [(x_lo, left, "start"), (x_hi, right, "end")] {
        let _ = write!(
            s,
            r##"<text x="{x}" y="{y}" font-size="10" text-anchor="{anchor}" fill="#555">{v}</text>"##,
            y = bottom + 13.0,
            v = esc(&num(value))
        );
    }
    for (value, y) in [(y_lo, bottom), (y_hi, top + 8.0)] {
        let _ = write!(
            s,
            r##"<text x="{x}" y="{y}" font-size="10" text-anchor="end" fill="#555">{v}</text>"##,
            x = left - 4.0,
            v = esc(&num(value))
        );
    }
    let _ = write!(
        s,
        r##"<text x="{x}" y="{y}" font-size="12" text-anchor="middle" fill="#222">{n}</text>"##,
        x = (left + right) / 2.0,
        y = height - 10.0,
        n = esc(x_name)
    );
    let _ = write!(
        s,
        r##"<text x="14" y="{y}" font-size="12" text-anchor="middle" fill="#222" transform="rotate(-90 14 {y})">{n}</text>"##,
        y = (top + bottom) / 2.0,
        n = esc(y_name)
    );
    for p in finite {
        let (fill, r) = if p.highlighted { ("#e66101", 6.0) } else { ("#2166ac", 4.5) };
        let _ = write!(
            s,
            r##"<circle class="point" data-head="{head}" cx="{x:.2}" cy="{y:.2}" r="{r}" fill="{fill}" fill-opacity="0.75" stroke="#222" stroke-width="0.6"><title>{label}</title></circle>"##,
            head = esc(&p.head),
            x = px(p.x),
            y = py(p.y),
            label = esc(&p.label)
        );
    }
    s.push_str("</svg>");
    s
}

/// One head's value over a timeline's revisions: a line through the revisions (a gap where a
/// value is missing), each point titled with its revision and value, the `selected` revision
/// ringed and ruled. When every revision names its step the revisions sit at log10(step + 1)
/// with ticks at 0 and the powers of ten, as the CLI's figure places them
/// (`timeline::positions`); else in order, each named under its point. A revision that repeats
/// an earlier one's weights (`same_weights_as`) is drawn hollow and says so in its title.
pub fn series_line(
    values: &[Option<f64>],
    revisions: &[crate::timeline::Revision],
    selected: usize,
    y_name: &str,
    title: &str,
) -> String {
    let (width, height, pad) = (520.0, 260.0, 48.0);
    let finite: Vec<f64> = values.iter().flatten().copied().filter(|v| v.is_finite()).collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if !lo.is_finite() {
        (0.0, 1.0)
    } else if hi - lo < 1e-12 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    };
    // Room on the right for the last revision's name, centred under its point.
    let (left, right, top, bottom) = (pad, width - 40.0, 16.0, height - pad);
    let (at, log) = crate::timeline::positions(revisions);
    let at: Vec<f64> = (0..values.len()).map(|i| at.get(i).copied().unwrap_or(i as f64)).collect();
    let x_hi = match log {
        true => at.iter().copied().fold(0.0, f64::max).ceil().max(1.0),
        false => values.len().saturating_sub(1).max(1) as f64,
    };
    let scale_x = |x: f64| left + x / x_hi * (right - left);
    let px = |i: usize| scale_x(at[i]);
    let py = |y: f64| bottom - (y - lo) / (hi - lo) * (bottom - top);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg class="series" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{t}"><rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/><rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fcfcfc" stroke="#ccc"/>"##,
        t = esc(title),
        w = right - left,
        h = bottom - top
    );
    if selected < values.len() {
        let _ = write!(
            s,
            r##"<line class="selected" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#e66101" stroke-dasharray="4 3"/>"##,
            x = px(selected)
        );
    }
    for (value, y) in [(lo, bottom), (hi, top + 8.0)] {
        let _ = write!(
            s,
            r##"<text x="{x}" y="{y}" font-size="10" text-anchor="end" fill="#555">{v}</text>"##,
            x = left - 4.0,
            v = esc(&num(value))
        );
    }
    let name_of = |i: usize| revisions.get(i).map_or(String::new(), |r| r.revision.clone());
    if log {
        // Ticks at step 0 and the powers of ten the steps reach; the names are in the titles.
        let ticks = std::iter::once((0.0, "0".to_string()))
            .chain((1..=x_hi as i32).map(|k| ((10f64.powi(k) + 1.0).log10(), power_of_ten(k))));
        for (x, label) in ticks {
            let _ = write!(
                s,
                r##"<line class="tick" x1="{x:.2}" y1="{top}" x2="{x:.2}" y2="{bottom}" stroke="#e4e4e4"/><text x="{x:.2}" y="{y}" font-size="10" text-anchor="middle" fill="#555">{label}</text>"##,
                x = scale_x(x),
                y = bottom + 13.0
            );
        }
        let _ = write!(
            s,
            r##"<text x="{x}" y="{y}" font-size="11" text-anchor="middle" fill="#222">training step (log scale of step + 1)</text>"##,
            x = (left + right) / 2.0,
            y = bottom + 30.0
        );
    } else {
        for i in 0..values.len() {
            let _ = write!(
                s,
                r##"<text x="{x:.2}" y="{y}" font-size="10" text-anchor="middle" fill="#555">{n}</text>"##,
                x = px(i),
                y = bottom + 13.0,
                n = esc(&name_of(i))
            );
        }
    }
    let _ = write!(
        s,
        r##"<text x="14" y="{y}" font-size="12" text-anchor="middle" fill="#222" transform="rotate(-90 14 {y})">{n}</text>"##,
        y = (top + bottom) / 2.0,
        n = esc(y_name)
    );
    // A run of consecutive known values is one polyline; a missing value breaks it.
    let mut run: Vec<String> = Vec::new();
    let mut runs = Vec::new();
    for (i, value) in values.iter().enumerate() {
        match value.filter(|v| v.is_finite()) {
            Some(v) => run.push(format!("{:.2},{:.2}", px(i), py(v))),
            None => runs.push(std::mem::take(&mut run)),
        }
    }
    runs.push(run);
    for points in runs.iter().filter(|r| r.len() > 1) {
        let _ =
            write!(s, r##"<polyline points="{}" fill="none" stroke="#2166ac" stroke-width="2"/>"##, points.join(" "));
    }
    for (i, value) in values.iter().enumerate() {
        let Some(v) = value.filter(|v| v.is_finite()) else { continue };
        let (r, stroke) = if i == selected { (6.0, "#e66101") } else { (4.0, "#222") };
        let same = revisions.get(i).and_then(|r| r.same_weights_as.as_deref());
        let (class, fill, note) = match same {
            Some(earlier) => ("point repeated", "#fff", format!(" (same weights as {earlier}: not fetched again)")),
            None => ("point", "#2166ac", String::new()),
        };
        let _ = write!(
            s,
            r##"<circle class="{class}" cx="{x:.2}" cy="{y:.2}" r="{r}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{name}: {v}{note}</title></circle>"##,
            x = px(i),
            y = py(v),
            name = esc(&name_of(i)),
            v = esc(&num(v)),
            note = esc(&note)
        );
    }
    s.push_str("</svg>");
    s
}

/// 10^k as a step label: 1, 10, 100, 1k, 10k, 100k, 1M, …
pub fn power_of_ten(k: i32) -> String {
    match k {
        0..=2 => 10u64.pow(k as u32).to_string(),
        3..=5 => format!("{}k", 10u64.pow(k as u32 - 3)),
        _ => format!("{}M", 10u64.pow((k - 6).max(0) as u32)),
    }
}

/// One edge of a [`layer_graph`]: a head (layer, head) that writes into a later one.
pub struct GraphEdge {
    pub from: (usize, usize),
    pub to: (usize, usize),
    /// 0 to 1: the line's width and opacity.
    pub weight: f64,
    /// Hover text (both heads and the exact values).
    pub title: String,
}

/// Heads as nodes in columns by layer (head 0 on top), each edge a curve from a writer to a
/// later reader, `colour` the edges' colour. Each node carries `data-head` (a click opens it);
/// the `selected` head is outlined, and its edges are drawn over the others, which fade.
pub fn layer_graph(
    layers: usize,
    heads: usize,
    edges: &[GraphEdge],
    colour: &str,
    selected: Option<(usize, usize)>,
    title: &str,
) -> String {
    let column = (760.0 / layers.max(1) as f64).clamp(56.0, 140.0);
    let row = (520.0 / heads.max(1) as f64).clamp(5.0, 30.0);
    let radius = (row * 0.36).clamp(2.0, 9.0);
    let (left, top) = (34.0, 26.0);
    let width = left + column * layers as f64 + 10.0;
    let height = top + row * heads as f64 + 10.0;
    let at = |(l, h): (usize, usize)| (left + column * (l as f64 + 0.5), top + row * (h as f64 + 0.5));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="layer-graph" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}" role="img" aria-label="{t}">"#,
        t = esc(title)
    );
    for l in 0..layers {
        let (x, _) = at((l, 0));
        let _ = write!(s, r##"<text x="{x:.1}" y="14" font-size="11" text-anchor="middle" fill="#333">L{l}</text>"##);
    }
    if row >= 11.0 {
        for h in 0..heads {
            let (_, y) = at((0, h));
            let _ = write!(
                s,
                r##"<text x="{x:.1}" y="{y:.1}" font-size="10" text-anchor="end" dominant-baseline="middle" fill="#666">H{h}</text>"##,
                x = left - 4.0
            );
        }
    }
    let touches = |e: &GraphEdge| selected.is_some_and(|h| e.from == h || e.to == h);
    // The selected head's edges last, so they lie on top.
    let ordered = edges.iter().filter(|e| !touches(e)).chain(edges.iter().filter(|e| touches(e)));
    for edge in ordered {
        let ((x1, y1), (x2, y2)) = (at(edge.from), at(edge.to));
        let (x1, x2) = (x1 + radius, x2 - radius);
        let bend = (x2 - x1) * 0.45;
        let weight = edge.weight.clamp(0.0, 1.0);
        let opacity = match selected {
            Some(_) if touches(edge) => 0.95,
            Some(_) => 0.12,
            None => 0.25 + 0.6 * weight,
        };
        let _ = write!(
            s,
            r#"<path class="edge{sel}" d="M{x1:.1},{y1:.1} C{c1:.1},{y1:.1} {c2:.1},{y2:.1} {x2:.1},{y2:.1}" fill="none" stroke="{colour}" stroke-width="{w:.2}" stroke-opacity="{opacity:.2}"><title>{t}</title></path>"#,
            sel = if touches(edge) { " selected" } else { "" },
            c1 = x1 + bend,
            c2 = x2 - bend,
            w = 0.6 + 2.6 * weight,
            colour = esc(colour),
            t = esc(&edge.title),
        );
    }
    for l in 0..layers {
        for h in 0..heads {
            let (x, y) = at((l, h));
            let chosen = selected == Some((l, h));
            let _ = write!(
                s,
                r##"<g class="node" data-head="L{l}H{h}"><circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}" fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/><title>L{l}H{h}</title></g>"##,
                r = if chosen { radius + 1.5 } else { radius },
                fill = if chosen { "#111" } else { "#fff" },
                stroke = if chosen { "#111" } else { "#555" },
                sw = if chosen { 2 } else { 1 },
            );
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_line_has_a_point_per_known_value_and_breaks_at_a_missing_one() {
        use crate::timeline::Revision;
        let names: Vec<Revision> = ["main", "step1", "step2", "step3"].map(|name| Revision::new(name, None)).to_vec();
        let svg = series_line(&[Some(0.1), None, Some(0.5), Some(0.9)], &names, 2, "induction score", "L1H0");
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("<polyline").count(), 1, "main stands alone; step2 to step3 is a line");
        assert!(svg.contains("<title>step2: 0.500</title>") && svg.contains("<title>step3: 0.900</title>"));
        assert_eq!(svg.matches(r##"stroke="#e66101" stroke-width="1.5""##).count(), 1, "the selected point is ringed");
        assert!(svg.contains(r#"class="selected""#));
        assert!(svg.contains(">main</text>") && !svg.contains("log scale"), "in order, named, when a step is missing");
    }

    #[test]
    fn a_series_line_spaces_steps_on_a_log_axis_and_marks_a_repeated_revision() {
        use crate::timeline::Revision;
        let revisions = vec![
            Revision::new("step0", None),
            Revision::new("step9", None),
            Revision::new("step99", None),
            Revision::repeating("step999", None, "step99"),
        ];
        let svg = series_line(&[Some(0.1), Some(0.2), Some(0.3), Some(0.3)], &revisions, 0, "score", "L0H0");
        // log10(step + 1) = 0, 1, 2, 3 of 3: evenly spaced from the left edge (48) to the right (480).
        let xs: Vec<f64> = svg
            .split("<circle")
            .skip(1)
            .map(|c| c.split("cx=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(xs, vec![48.0, 192.0, 336.0, 480.0]);
        assert!(svg.contains("log scale") && svg.contains(">1k</text>") && !svg.contains(">step9</text>"));
        assert_eq!(svg.matches("class=\"point repeated\"").count(), 1);
        assert!(svg.contains("(same weights as step99: not fetched again)"));
    }

    #[test]
    fn colours_are_clamped() {
        assert_eq!(viridis(-1.0).fill, "rgb(68,1,84)");
        assert_eq!(viridis(2.0).fill, "rgb(253,231,37)");
        assert_eq!(diverging(0.0).fill, "rgb(247,247,247)");
    }
    #[test]
    fn a_layer_graph_has_a_node_per_head_and_an_edge_per_pair() {
        let edges = [
            GraphEdge { from: (0, 1), to: (2, 0), weight: 1.0, title: "L0H1 → L2H0 <b>".into() },
            GraphEdge { from: (1, 0), to: (2, 1), weight: 0.0, title: "L1H0 → L2H1".into() },
        ];
        let svg = layer_graph(3, 2, &edges, "#b2182b", Some((2, 0)), "K & graph");
        assert_eq!(svg.matches(r#"class="node""#).count(), 6);
        assert_eq!(svg.matches("<path").count(), 2);
        // The selected head's edge is drawn last (on top), and text is escaped.
        assert_eq!(svg.rfind("<path"), svg.find(r#"<path class="edge selected""#));
        assert!(svg.contains("&lt;b&gt;") && svg.contains("K &amp; graph"));
        assert!(svg.contains(r#"data-head="L2H0""#));
    }
}
