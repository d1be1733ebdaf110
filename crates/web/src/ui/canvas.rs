//! Dense views on an HTML canvas: the head grid of a model with many heads, the attention heatmap
//! of a long prompt and the OV token matrix. Thousands of SVG elements make the page stutter
//! (docs/benchmarks.md#dense-views-svg-against-canvas), so above a size these charts are one
//! canvas. plotters (`plotters-canvas`) draws the labels and the colour bar through the same
//! `figures::matrix` code as the CLI's files; the cells are filled as one `ImageData` of the
//! block's device pixels, put once (the fastest of the ways that page compares). Hover and the
//! keyboard find a cell through the same `Layout`, and an HTML tooltip gives its exact value.
//! Exports redraw the figure: PNG on a canvas at twice the size, SVG through plotters' SVG backend.

use std::sync::{Arc, OnceLock};

use leptos::prelude::*;
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;
use wasm_bindgen::{Clamped, JsCast};

use super::browser::{download_text, download_url};
use super::export::stem;
use super::state::Ctx;
use crate::js::js_message;
use headprint::figures::colour::Scale;
use headprint::figures::matrix::{
    BAR_SPACE, BAR_TITLE_GAP, Labels, Layout, cell_pixels, draw_frame, fill_cells, outline,
};
use headprint::figures::{Area, DrawResult, MARK, token_label};
use headprint::worker::protocol::Pattern;

/// The head grid is a canvas above this many heads (a 16 x 16 grid of buttons still lays out
/// within a frame; Llama-3-8B's 1024 do not).
pub const GRID_CANVAS_HEADS: usize = 256;
/// An attention heatmap is a canvas above this many tokens (64^2 / 2 = 2k SVG cells).
pub const HEATMAP_CANVAS_TOKENS: usize = 64;
/// PNG exports are drawn at this multiple of the chart's CSS size, or the screen's pixel
/// ratio if larger.
const PNG_SCALE: f64 = 2.0;

/// How charts that have both paths are drawn: by size (the default), or forced by the page's
/// `?render=svg|canvas|canvas-rects` query parameter (the frame benchmark compares them;
/// `canvas-rects` fills the cells as plotters rectangles instead of one image).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    BySize,
    Svg,
    Canvas,
    CanvasRects,
}

/// The page's render choice, read once from its address.
pub fn render() -> Render {
    static CHOICE: OnceLock<Render> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        let search = web_sys::window().and_then(|w| w.location().search().ok()).unwrap_or_default();
        let value = search.trim_start_matches('?').split('&').find_map(|kv| kv.strip_prefix("render="));
        match value {
            Some("svg") => Render::Svg,
            Some("canvas") => Render::Canvas,
            Some("canvas-rects") => Render::CanvasRects,
            _ => Render::BySize,
        }
    })
}

/// Whether a chart of `size` (heads, tokens) is drawn on a canvas.
pub fn use_canvas(size: usize, threshold: usize) -> bool {
    match render() {
        Render::BySize => size > threshold,
        Render::Svg => false,
        Render::Canvas | Render::CanvasRects => true,
    }
}

/// What a cell's tooltip says (its exact value); None for a blank cell.
pub type Tip = Arc<dyn Fn(usize, usize) -> Option<String> + Send + Sync>;

/// A matrix chart as both paths draw it: labels, cell colours, the colour bar's scale, marks.
pub struct DenseMatrix {
    /// What the chart shows (the canvas's accessible name).
    pub title: String,
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    pub row_axis: String,
    /// Row-major cell colours; None is left blank (the masked future of a pattern).
    pub fills: Vec<Option<[u8; 3]>>,
    pub scale: Scale,
    /// Cells outlined (induction cells).
    pub marks: Vec<(usize, usize)>,
    /// Cell size, CSS pixels.
    pub cell: f64,
    pub tip: Tip,
}

/// Rough width of `chars` characters of `font` px text (labels' margins; sans-serif averages
/// about 0.6 em).
fn text_px(chars: usize, font: f64) -> f64 {
    chars as f64 * font * 0.62
}

impl DenseMatrix {
    /// The cell size for `n` cells across about `max_px`, between 1 and `largest` px.
    pub fn cell_for(n: usize, max_px: f64, largest: f64) -> f64 {
        (max_px / n.max(1) as f64).clamp(1.0, largest)
    }

    /// Where the cells are, and the whole chart's CSS size.
    pub fn geometry(&self) -> (Layout, f64, f64) {
        let (rows, cols) = (self.rows.len(), self.cols.len());
        let font = (self.cell * 0.75).clamp(6.0, 12.0);
        let longest = |labels: &[String]| labels.iter().map(|l| l.chars().count()).max().unwrap_or(1);
        let labelled = self.cell >= 7.0;
        let left = if labelled { text_px(longest(&self.rows), font) } else { text_px(rows.to_string().len(), 10.0) };
        let top = if labelled { text_px(longest(&self.cols), font) } else { 14.0 };
        let axis = if self.row_axis.is_empty() { 0.0 } else { 18.0 };
        // The colour bar's title sits above the cells' top edge, clear of its top label.
        let clear = BAR_TITLE_GAP + 14.0;
        let layout = Layout::new((left + 10.0 + axis).ceil(), (top + 10.0).max(clear).ceil(), self.cell, rows, cols);
        let bar_labels = 48.0;
        let width = layout.x + layout.width() + BAR_SPACE + bar_labels;
        let height = layout.y + layout.height().max(layout.height().clamp(90.0, 260.0)) + 12.0;
        (layout, width.ceil(), height.ceil())
    }

    /// Labels and colour bar (not the cells, nor the marks).
    fn draw_frame<DB: DrawingBackend>(&self, area: &Area<DB>, layout: &Layout) -> DrawResult<DB> {
        let labels = Labels { rows: &self.rows, cols: &self.cols, row_axis: &self.row_axis, col_axis: "" };
        draw_frame(area, layout, &labels, &self.scale)
    }

    /// The marked cells' outlines, one rectangle each (the SVG export; the canvas draws them
    /// in its pixels).
    fn draw_marks<DB: DrawingBackend>(&self, area: &Area<DB>, layout: &Layout) -> DrawResult<DB> {
        for &(r, c) in &self.marks {
            if r < layout.rows && c < layout.cols {
                outline(area, layout, r, c, MARK)?;
            }
        }
        Ok(())
    }

    fn colour(&self, r: usize, c: usize) -> Option<RGBColor> {
        self.fills.get(r * self.cols.len() + c).copied().flatten().map(|[r, g, b]| RGBColor(r, g, b))
    }

    /// The chart as a standalone SVG document, every cell a rectangle (plotters' SVG backend,
    /// the same frame code as the canvas).
    pub fn svg(&self) -> Result<String, String> {
        let (layout, width, height) = self.geometry();
        let mut text = String::new();
        {
            let area = SVGBackend::with_string(&mut text, (width as u32, height as u32)).into_drawing_area();
            let drawn = area
                .fill(&WHITE)
                .and_then(|_| fill_cells(&area, &layout, |r, c| self.colour(r, c)))
                .and_then(|_| self.draw_marks(&area, &layout))
                .and_then(|_| self.draw_frame(&area, &layout))
                .and_then(|_| area.present());
            drawn.map_err(|e| format!("the chart could not be drawn as SVG: {e}"))?;
        }
        Ok(text)
    }
}

fn context_2d(canvas: &web_sys::HtmlCanvasElement) -> Result<web_sys::CanvasRenderingContext2d, String> {
    canvas
        .get_context("2d")
        .map_err(|e| js_message(&e))?
        .ok_or("no 2d canvas")?
        .dyn_into()
        .map_err(|_| "not a 2d context".to_string())
}

fn new_canvas() -> Result<web_sys::HtmlCanvasElement, String> {
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    document.create_element("canvas").map_err(|e| js_message(&e))?.dyn_into().map_err(|_| "not a canvas".into())
}

/// Draws the chart on `canvas` at `factor` device pixels per CSS pixel: the backing store is
/// the CSS size times `factor` (sharp at any devicePixelRatio), and plotters draws in CSS
/// pixels through the context's transform.
pub fn paint(canvas: &web_sys::HtmlCanvasElement, m: &DenseMatrix, factor: f64, mode: Render) -> Result<(), String> {
    let (layout, width, height) = m.geometry();
    canvas.set_width((width * factor).round() as u32);
    canvas.set_height((height * factor).round() as u32);
    let context = context_2d(canvas)?;
    context.set_transform(factor, 0.0, 0.0, factor, 0.0, 0.0).map_err(|e| js_message(&e))?;
    context.set_fill_style_str("#ffffff");
    context.fill_rect(0.0, 0.0, width, height);
    let area = CanvasBackend::with_canvas_object(canvas.clone()).ok_or("no 2d canvas")?.into_drawing_area();
    if mode == Render::CanvasRects {
        fill_cells(&area, &layout, |r, c| m.colour(r, c)).map_err(|e| e.to_string())?;
        m.draw_marks(&area, &layout).map_err(|e| e.to_string())?;
    } else if layout.rows > 0 && layout.cols > 0 {
        // Every device pixel of the cell block, the marks' outlines included, in one
        // ImageData put once (a put ignores the transform, so this works in device pixels;
        // faster than drawing a one-pixel-per-cell image scaled up, which costs a resampling
        // pass, and than a strokeRect a mark).
        let fills = &m.fills;
        let cols = layout.cols;
        let colour = |r: usize, c: usize| fills.get(r * cols + c).copied().flatten();
        let [red, green, blue] = [MARK.0, MARK.1, MARK.2];
        let (w, h, pixels) = cell_pixels(&layout, factor, colour, &m.marks, [red, green, blue]);
        let image = web_sys::ImageData::new_with_u8_clamped_array_and_sh(Clamped(&pixels), w as u32, h as u32)
            .map_err(|e| js_message(&e))?;
        let (x0, y0) = ((layout.x * factor).round(), (layout.y * factor).round());
        context.put_image_data(&image, x0, y0).map_err(|e| js_message(&e))?;
    }
    m.draw_frame(&area, &layout).map_err(|e| e.to_string())
}

fn device_pixel_ratio() -> f64 {
    web_sys::window().map_or(1.0, |w| w.device_pixel_ratio()).max(1.0)
}

/// The chart as a PNG download: drawn afresh at twice its CSS size (or the screen's ratio).
fn download_png(file_name: &str, m: &DenseMatrix) -> Result<(), String> {
    let canvas = new_canvas()?;
    paint(&canvas, m, PNG_SCALE.max(device_pixel_ratio()), Render::Canvas)?;
    let data_url = canvas.to_data_url_with_type("image/png").map_err(|e| js_message(&e))?;
    download_url(file_name, &data_url)
}

/// A dense chart on a canvas with its hover tooltip, keyboard navigation (arrow keys move a
/// focused cell, whose value the tooltip shows; Enter or a click calls `on_open`), and SVG /
/// PNG export buttons (unless `no_export`). `id` names the canvas; `focus` is the cell the keyboard starts on and
/// `selected` a cell outlined as chosen (the open head).
#[component]
pub fn CanvasMatrix(
    matrix: Arc<DenseMatrix>,
    id: String,
    name: String,
    #[prop(optional)] on_open: Option<Callback<(usize, usize)>>,
    #[prop(optional)] focus: Option<(usize, usize)>,
    #[prop(optional)] selected: Option<(usize, usize)>,
    /// No SVG / PNG buttons (the preview grid of a load, soon replaced by the real one).
    #[prop(optional)]
    no_export: bool,
) -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let canvas_ref = NodeRef::<leptos::html::Canvas>::new();
    let (layout, width, height) = matrix.geometry();
    let (rows, cols) = (layout.rows, layout.cols);
    let shown = RwSignal::new(None::<(usize, usize)>);
    let keyboard = RwSignal::new(false);
    let at = RwSignal::new(focus.unwrap_or((0, 0)));
    let problem = RwSignal::new(None::<String>);
    let painted = matrix.clone();
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            let mode = if render() == Render::CanvasRects { Render::CanvasRects } else { Render::Canvas };
            if let Err(e) = paint(&canvas, &painted, device_pixel_ratio(), mode) {
                problem.set(Some(e));
            }
        }
    });
    let open = move |cell: (usize, usize)| {
        if let Some(callback) = on_open {
            callback.run(cell);
        }
    };
    let on_key = move |ev: web_sys::KeyboardEvent| {
        let (r, c) = at.get_untracked();
        let next = match ev.key().as_str() {
            "ArrowRight" => (r, (c + 1).min(cols.saturating_sub(1))),
            "ArrowLeft" => (r, c.saturating_sub(1)),
            "ArrowDown" => ((r + 1).min(rows.saturating_sub(1)), c),
            "ArrowUp" => (r.saturating_sub(1), c),
            "Home" => (r, 0),
            "End" => (r, cols.saturating_sub(1)),
            "Enter" | " " => {
                ev.prevent_default();
                open((r, c));
                return;
            }
            _ => return,
        };
        ev.prevent_default();
        at.set(next);
        keyboard.set(true);
        shown.set(Some(next));
    };
    let box_style = move |(r, c): (usize, usize)| {
        let (x0, y0, x1, y1) = layout.cell(r, c);
        format!("left:{x0}px;top:{y0}px;width:{}px;height:{}px", (x1 - x0).max(2), (y1 - y0).max(2))
    };
    let tip_matrix = matrix.clone();
    let tip = move || {
        let (r, c) = shown.get()?;
        let text = (tip_matrix.tip)(r, c)?;
        let (_, _, x1, y1) = layout.cell(r, c);
        // Right of and below the cell; left of it near the right edge.
        let (x, y) = (x1 as f64 + 6.0, y1 as f64 + 6.0);
        let side =
            if x > width - 220.0 { format!("right:{:.0}px", width - x + 12.0) } else { format!("left:{x:.0}px") };
        Some(view! {
            <div class="canvas-tip" role="status" data-row=r data-col=c style=format!("{side};top:{y:.0}px")>
                {text}
            </div>
        })
    };
    let label = if on_open.is_some() {
        format!("{}: arrow keys move, Enter opens", matrix.title)
    } else {
        format!("{}: arrow keys move between cells", matrix.title)
    };
    let export = matrix.clone();
    let file = move |extension: &str| {
        let model = ctx.loaded.get_untracked().map(|l| l.name.clone()).unwrap_or_default();
        format!("{}.{extension}", stem(&model, &name))
    };
    let file_png = file.clone();
    let export_png = matrix.clone();
    view! {
        <div class="chart-scroll">
            <div class="canvas-chart" style=format!("width:{width}px;height:{height}px")>
                <canvas
                    node_ref=canvas_ref
                    id=id
                    class="dense"
                    tabindex="0"
                    role="application"
                    aria-label=label
                    data-layout=format!("{},{},{},{}", layout.x, layout.y, layout.cell_w, layout.cell_h)
                    data-rows=rows
                    data-cols=cols
                    style=format!("width:{width}px;height:{height}px")
                    on:mousemove=move |ev: web_sys::MouseEvent| {
                        keyboard.set(false);
                        shown.set(layout.cell_at(ev.offset_x() as f64, ev.offset_y() as f64));
                    }
                    on:mouseleave=move |_| shown.set(None)
                    on:click=move |ev: web_sys::MouseEvent| {
                        if let Some(cell) = layout.cell_at(ev.offset_x() as f64, ev.offset_y() as f64) {
                            at.set(cell);
                            open(cell);
                        }
                    }
                    on:keydown=on_key
                    on:focus=move |_| {
                        keyboard.set(true);
                        shown.set(Some(at.get_untracked()));
                    }
                    on:blur=move |_| {
                        keyboard.set(false);
                        shown.set(None);
                    }
                ></canvas>
                {selected.map(|cell| view! { <div class="canvas-selected" style=box_style(cell)></div> })}
                {move || keyboard.get().then(|| view! { <div class="canvas-focus" style=box_style(at.get())></div> })}
                {tip}
            </div>
        </div>
        {(!no_export)
            .then(|| {
                view! {
                    <span class="chart-export">
                        <button
                            class="small"
                            data-export="svg"
                            on:click=move |_| {
                                problem.set(export.svg().and_then(|svg| download_text(&file("svg"), &svg, "image/svg+xml")).err())
                            }
                        >
                            "SVG"
                        </button>
                        <button
                            class="small"
                            data-export="png"
                            on:click=move |_| problem.set(download_png(&file_png("png"), &export_png).err())
                        >
                            "PNG"
                        </button>
                    </span>
                }
            })}
        // A drawing or export failure, in one line (the preview grid too, which has no buttons).
        {move || problem.get().map(|e| view! { <span class="error-inline">{e}</span> })}
    }
}

/// An attention pattern (query rows, key columns; the masked future blank) with its induction
/// cells outlined and the weight's colour bar, coloured as the SVG heatmap is.
pub fn attention_matrix(pattern: &Pattern, title: String, max_px: f64) -> DenseMatrix {
    let n = pattern.tokens.len();
    let scale = headprint::figures::attention::Pattern::scale();
    let fills = (0..n)
        .flat_map(|q| (0..n).map(move |k| (q, k)))
        .map(|(q, k)| if k > q { None } else { pattern.rows.get(q).and_then(|r| r.get(k)).map(|&w| scale.rgb(w)) })
        .collect();
    let labels: Vec<String> = pattern.tokens.iter().map(|t| token_label(t)).collect();
    let (rows, tokens) = (Arc::new(pattern.rows.clone()), Arc::new(labels.clone()));
    let tip: Tip = Arc::new(move |q, k| {
        let w = if k > q { None } else { rows.get(q).and_then(|r| r.get(k)) }?;
        Some(format!("query {q} `{}` → key {k} `{}`: {w}", tokens[q], tokens[k]))
    });
    DenseMatrix {
        title,
        rows: labels.clone(),
        cols: labels,
        row_axis: String::new(),
        fills,
        scale,
        marks: pattern.marks.clone(),
        cell: DenseMatrix::cell_for(n, max_px, 22.0),
        tip,
    }
}

/// A block of the token-space OV circuit: rows the attended (source) tokens, columns the
/// logits they move, on a diverging scale symmetric about 0.
pub fn ov_matrix(tokens: &[String], values: &[Vec<f64>], title: String, max_px: f64) -> DenseMatrix {
    let limit = values.iter().flatten().map(|v| v.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let scale = Scale::diverging(limit, "OV logit");
    let fills = values.iter().flat_map(|row| row.iter().map(|&v| Some(scale.rgb(v)))).collect();
    let labels: Vec<String> = tokens.iter().map(|t| token_label(t)).collect();
    let (values, names) = (Arc::new(values.to_vec()), Arc::new(labels.clone()));
    let tip: Tip = Arc::new(move |i, j| {
        let v = values.get(i)?.get(j)?;
        Some(format!("attending `{}` → logit of `{}`: {v}", names[i], names[j]))
    });
    DenseMatrix {
        title,
        rows: labels.clone(),
        cols: labels,
        row_axis: "attended token".into(),
        fills,
        scale,
        marks: Vec::new(),
        cell: DenseMatrix::cell_for(tokens.len(), max_px, 22.0),
        tip,
    }
}
