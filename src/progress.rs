//! Progress on stderr for the long stages (the Grams, the heads, the probe's layers, opening a
//! link), with the bytes fetched and their rate for a model by link. Drawn only when stderr is
//! a terminal and without `--quiet`: nothing changes on stdout.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);
/// The bar drawn now, if any: a line said meanwhile is printed above it, not through it.
static SHOWN: Mutex<Option<(u64, ProgressBar)>> = Mutex::new(None);
/// Numbers each stage, so that a stage dropped late does not forget a newer one's bar.
static STAGES: AtomicU64 = AtomicU64::new(0);
/// When the run began: the download rate is over the whole run.
static START: OnceLock<Instant> = OnceLock::new();

pub fn configure(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
    START.get_or_init(Instant::now);
}

/// One stage's bar; cleared when dropped.
pub struct Stage {
    bar: ProgressBar,
    id: u64,
}

/// A bar for `label` counting `unit`s to `total` (None: a spinner).
pub fn stage(label: &str, total: Option<usize>, unit: &'static str) -> Stage {
    let target =
        if QUIET.load(Ordering::Relaxed) { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(total.map(|t| t as u64), target);
    let stage = Stage { bar, id: STAGES.fetch_add(1, Ordering::Relaxed) };
    stage.switch(label, total.is_some(), unit);
    stage.bar.enable_steady_tick(Duration::from_millis(200));
    *SHOWN.lock().unwrap_or_else(|e| e.into_inner()) = Some((stage.id, stage.bar.clone()));
    stage
}

/// A line on stderr as it happens (a note of the network's), above the bar when one is drawn.
/// `--quiet` hides bars only, never notes.
pub fn say(line: &str) {
    match SHOWN.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some((_, bar)) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

fn style(counted: bool, unit: &'static str) -> Option<ProgressStyle> {
    let template = match counted {
        true => "{prefix:>12} [{bar:30}] {pos}/{len} {unit}{net}  {elapsed}",
        false => "{prefix:>12} {spinner} {msg}{net}  {elapsed}",
    };
    let style = ProgressStyle::with_template(template).ok()?;
    Some(
        style
            .progress_chars("=> ")
            .with_key("unit", move |_: &ProgressState, w: &mut dyn Write| {
                let _ = w.write_str(unit);
            })
            .with_key("net", |_: &ProgressState, w: &mut dyn Write| {
                if let Some(bytes) = headprint_native::open::bytes_fetched().filter(|&b| b > 0) {
                    let seconds = START.get().map_or(1.0, |start| start.elapsed().as_secs_f64()).max(1e-3);
                    let _ = write!(w, " · {} fetched", megabytes(bytes));
                    let _ = write!(w, " ({}/s)", megabytes((bytes as f64 / seconds) as u64));
                }
            }),
    )
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

impl Stage {
    /// The same line, now counting another stage's units from zero.
    pub fn switch(&self, label: &str, counted: bool, unit: &'static str) {
        if let Some(style) = style(counted, unit) {
            self.bar.set_style(style);
        }
        self.bar.set_prefix(label.to_string());
        self.bar.set_position(0);
    }

    pub fn set(&self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
    }

    pub fn message(&self, message: String) {
        self.bar.set_message(message);
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
        if shown.as_ref().is_some_and(|(id, _)| *id == self.id) {
            *shown = None;
        }
    }
}

/// A fingerprint with its stages shown: the Grams' vocabulary rows, then the heads.
pub fn fingerprint(
    model: &headprint::model::ModelStream,
    mode: headprint::analysis::Mode,
    backend: &mut headprint::backend::Backend,
) -> headprint::Result<headprint::analysis::ModelFingerprint> {
    use headprint::analysis::FingerprintStage;
    let bar = stage("Grams", Some(model.config.vocab), "vocabulary rows");
    let mut showing = FingerprintStage::Grams;
    headprint::analysis::fingerprint_stream_watched(model, mode, backend, &mut |now, done, total| {
        if now != showing {
            showing = now;
            match now {
                FingerprintStage::Grams => bar.switch("Grams", true, "vocabulary rows"),
                FingerprintStage::Heads => bar.switch("heads", true, "heads"),
            }
        }
        bar.set(done, total);
    })
}

/// The induction probe on `backend` with its layers shown; a GPU that fails on the way reruns
/// the whole probe on the CPU (the backend then says so in its note).
pub fn induction_probe(
    model: &(impl headprint::model::Weights + ?Sized),
    copies: &[headprint::probes::induction::FirstCopy],
    bos: Option<usize>,
    backend: &mut headprint::backend::Backend,
) -> headprint::Result<headprint::probes::induction::InductionReport> {
    use headprint::probes::induction::induction_probe_with_progress;
    let bar = stage("probe", Some(model.config().layers), "layers");
    headprint::backend::block_on(backend.with_fallback(async |backend| {
        induction_probe_with_progress(model, copies, bos, backend, &mut |done, total| bar.set(done, total)).await
    }))
}
