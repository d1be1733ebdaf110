//! Keeps GPU drivers' chatter off the CLI's stderr. Opening a Vulkan adapter on a machine with
//! no display server makes libwayland (loaded by Mesa's window-system support) print
//! `error: XDG_RUNTIME_DIR is invalid or not set in the environment.` although nothing failed;
//! a user reads that as a failure. What the driver writes while the adapter opens is caught, and
//! only lines that are not that message are passed on.

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;

/// Messages known to be harmless, dropped.
const HARMLESS: [&str; 1] = ["XDG_RUNTIME_DIR is invalid or not set"];

/// Runs `open` with file descriptor 2 sent to a temporary file, then puts stderr back and
/// passes on what the driver wrote, less the harmless lines. Where stderr cannot be moved,
/// `open` runs as it is.
pub fn quietly<T>(open: impl FnOnce() -> T) -> T {
    let Some((mut caught, saved)) = redirect() else { return open() };
    let result = open();
    // SAFETY: `saved` is the duplicate of fd 2 made in `redirect`, still open; dup2 only
    // replaces fd 2 with it, and it is closed once.
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
    }
    let mut text = String::new();
    if caught.rewind().is_ok() && caught.read_to_string(&mut text).is_ok() {
        let mut stderr = std::io::stderr().lock();
        for line in text.lines().filter(|line| !HARMLESS.iter().any(|h| line.contains(h))) {
            let _ = writeln!(stderr, "{line}");
        }
    }
    result
}

fn redirect() -> Option<(std::fs::File, i32)> {
    let path = std::env::temp_dir().join(format!("headprint-driver-{}.log", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let _ = std::io::stderr().flush();
    // SAFETY: dup and dup2 act on descriptors this process owns (2 and the file just opened);
    // on failure nothing has changed.
    unsafe {
        let saved = libc::dup(2);
        if saved < 0 {
            return None;
        }
        if libc::dup2(file.as_raw_fd(), 2) < 0 {
            libc::close(saved);
            return None;
        }
        Some((file, saved))
    }
}
