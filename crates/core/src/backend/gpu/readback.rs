//! Results back from the device: copied into the kept read-back buffer, mapped, and handed over
//! as f32 values (or, for two-part results, their sums in f64). Reading back is awaited:
//! natively the device is waited for first, so the future is ready at once; in the browser it
//! resolves from the event loop.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use super::Gpu;
use super::buffers::Role;
use super::failure::Scopes;
use super::split::SMALLEST_CHUNK;
use crate::parallel::each_chunk;
use crate::{Error, Result};

impl Gpu {
    /// Reads the two f32 parts back into `c` (their sums in f64, in the parts' column-major
    /// order).
    pub(super) async fn read_into(&self, c: &mut [f64], (high, low): (&wgpu::Buffer, &wgpu::Buffer)) -> Result<()> {
        let size = (4 * c.len()) as u64;
        self.read_back(&[(high, 0..size), (low, 0..size)], |values| {
            let (high, low) = values.split_at(c.len());
            each_chunk(c, SMALLEST_CHUNK, |start, chunk| {
                let parts = high[start..].iter().zip(&low[start..]);
                for (entry, (&h, &l)) in chunk.iter_mut().zip(parts) {
                    *entry = h as f64 + l as f64;
                }
            });
        })
        .await
    }

    /// Copies the byte range of each of `parts`, one after another, into the kept read-back
    /// buffer, waits for them, and hands their f32 values to `take`.
    pub(super) async fn read_back<R>(
        &self,
        parts: &[(&wgpu::Buffer, Range<u64>)],
        take: impl FnOnce(&[f32]) -> R,
    ) -> Result<R> {
        let size: u64 = parts.iter().map(|(_, bytes)| bytes.end - bytes.start).sum();
        let scope = Scopes::push(&self.device);
        let read_buffer =
            self.scratch(Role::ReadBack, size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let mut at = 0;
        for (buffer, bytes) in parts {
            encoder.copy_buffer_to_buffer(buffer, bytes.start, &read_buffer, at, bytes.end - bytes.start);
            at += bytes.end - bytes.start;
        }
        self.queue.submit([encoder.finish()]);
        self.from_device.fetch_add(size, Ordering::Relaxed);
        scope.pop(self).await?;

        let (signal, future) = signal();
        read_buffer.slice(..size).map_async(wgpu::MapMode::Read, signal);
        let mapped = async {
            // Natively this waits for the device (and runs the callback); the browser's device
            // needs no polling and the callback comes from its event loop.
            self.wait()?;
            let mapping = future.await;
            self.check()?;
            mapping.map_err(|e| Error::Gpu(format!("reading the result back: {e}")))?;
            read_buffer.get_mapped_range(..size).map_err(|e| Error::Gpu(format!("reading the result back: {e}")))
        }
        .await;
        let view = match mapped {
            Ok(view) => view,
            Err(e) => {
                // The kept buffer may be left mapped or pending: a later read gets a new one.
                self.scratch.lock().unwrap_or_else(|e| e.into_inner()).remove(&Role::ReadBack);
                return Err(e);
            }
        };
        let taken = take(bytemuck::cast_slice(&view));
        drop(view);
        read_buffer.unmap();
        Ok(taken)
    }

    /// Waits for every product submitted so far: natively by blocking, in the browser through
    /// the event loop.
    pub(super) async fn idle(&self) -> Result<()> {
        let (signal, future) = signal();
        self.queue.on_submitted_work_done(move || signal(()));
        self.wait()?;
        future.await;
        self.check()
    }

    /// Natively, blocks until the device is idle (running wgpu's callbacks); in the browser
    /// nothing (callbacks come from the event loop).
    pub(super) fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))
    }
}

/// A callback's value handed to the task awaiting it: the callback (to give wgpu) and the
/// future (to await).
fn signal<T: Send + 'static>() -> (impl FnOnce(T) + Send + 'static, impl Future<Output = T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None }));
    let sender = slot.clone();
    let send = move |value| {
        let mut slot = sender.lock().unwrap_or_else(|e| e.into_inner());
        slot.value = Some(value);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
    };
    let receive = std::future::poll_fn(move |context| {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        match slot.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.waker = Some(context.waker().clone());
                Poll::Pending
            }
        }
    });
    (send, receive)
}

/// A callback's value, and the task waiting for it.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}
