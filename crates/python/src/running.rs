//! Long work off the interpreter's lock: it runs on its own thread while the calling thread
//! waits without the GIL, wakes every tenth of a second to pass progress to Python and to
//! look for Ctrl-C, and on Ctrl-C stops the work at its next weight read and raises
//! KeyboardInterrupt. A Ctrl-C seen at any point of the call raises, even one that came as the
//! work finished.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headprint::weights::ByteSource;
use headprint::{Error, Result};
use pyo3::prelude::*;

/// Set when the caller gave up: every read of the model's bytes then fails, so the work ends
/// at its next tensor.
#[derive(Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
    fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A model file whose reads stop once its flag is raised.
pub struct Stoppable {
    pub inner: Box<dyn ByteSource>,
    pub stop: StopFlag,
}

impl ByteSource for Stoppable {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if self.stop.raised() {
            return Err(Error::Interrupted);
        }
        self.inner.read_range(offset, len)
    }
    fn will_read(&self, ranges: Vec<std::ops::Range<u64>>) {
        self.inner.will_read(ranges)
    }
}

/// Where the work is: a stage's name, and how many of how many units it has done.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<Option<(String, usize, usize)>>>);

impl Progress {
    pub fn set(&self, stage: &str, done: usize, total: usize) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((stage.to_string(), done, total));
    }
    fn take(&self) -> Option<(String, usize, usize)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Runs `work` on a thread of its own; `report` (a Python callable or None) is called with
/// (stage, done, total) as the work moves on.
pub fn off_the_lock<T: Send + 'static>(
    py: Python<'_>,
    stop: &StopFlag,
    report: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(Progress) -> Result<T> + Send + 'static,
) -> PyResult<T> {
    stop.clear();
    let progress = Progress::default();
    let (sender, receiver) = mpsc::sync_channel(1);
    let shown = progress.clone();
    // Waiting happens without the GIL, which wants what it waits on to be shareable.
    let receiver = Mutex::new(receiver);
    let worker = std::thread::Builder::new()
        .name("headprint".into())
        .spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(shown)));
            let _ = sender.send(outcome.unwrap_or_else(|_| Err(Error::Internal("the computation panicked".into()))));
        })
        .map_err(|e| crate::error(Error::Internal(format!("cannot start a thread: {e}"))))?;
    // Stops the work and waits for it to end, so that nothing runs on after the call returns.
    let stop_and_wait = |py: Python<'_>| {
        stop.raise();
        py.detach(|| {
            let _ = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
        });
    };
    let outcome = loop {
        let waited =
            py.detach(|| receiver.lock().unwrap_or_else(|e| e.into_inner()).recv_timeout(Duration::from_millis(100)));
        if let (Some(report), Some((stage, done, total))) = (report, progress.take()) {
            // Ctrl-C may arrive inside the callback (tqdm's drawing is Python code).
            if let Err(raised) = report.call1((stage, done, total)) {
                if waited.is_err() {
                    stop_and_wait(py);
                }
                break Err(raised);
            }
        }
        match waited {
            Ok(outcome) => break outcome.map_err(crate::error),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(interrupt) = py.check_signals() {
                    stop_and_wait(py);
                    break Err(interrupt);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(crate::error(Error::Internal("the computation ended without a result".into())));
            }
        }
    };
    let _ = worker.join();
    // A Ctrl-C that came after the last look (as the work finished, while its result came
    // back) is still pending. Python raises a pending signal at its next check; this call is
    // that check, rather than handing back a result as if no Ctrl-C had come and leaving the
    // raise to whatever runs next (C code that calls this in a loop would go on first).
    py.check_signals()?;
    outcome
}
