//! Hooks for examples/gpu_kernels.rs, which times variants of products.wgsl against each
//! other: not part of the backend's interface.

#[cfg(not(target_arch = "wasm32"))]
use super::buffers::Side;
#[cfg(not(target_arch = "wasm32"))]
use super::products::{Batch, Shape};
use super::{Arithmetic, Gpu};
use crate::Result;

impl Gpu {
    /// [`Gpu::open`] with other kernels (the same entry points and bindings) and runtime checks.
    ///
    /// # Safety
    /// With checks other than `ShaderRuntimeChecks::checked()`, `kernels` must never index
    /// outside their bindings nor loop without end: nothing then stops them.
    #[doc(hidden)]
    pub async unsafe fn open_with(
        allow_software: bool,
        kernels: &str,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> Result<Gpu> {
        // SAFETY: the caller's contract is this function's.
        unsafe { Self::open_kernels(allow_software, Some(kernels), Arithmetic::F32Pairs, checks) }.await
    }

    /// Seconds each of `repeats` dispatches of the kernel alone took (inputs uploaded once,
    /// nothing read back), on `rows` x m and `rows` x n inputs of small integers (`syrk`: the
    /// first one alone), `wide` with rest parts. Natively only, where waiting for the device
    /// blocks.
    #[doc(hidden)]
    #[cfg(not(target_arch = "wasm32"))]
    pub fn time_kernel(
        &self,
        (rows, m, n): (usize, usize, usize),
        syrk: bool,
        wide: bool,
        repeats: usize,
    ) -> Result<Vec<f64>> {
        let values = |count: usize| (0..count).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>();
        let (a_value, b_value) = (values(rows * m), values(rows * n));
        let rests = |len: usize| wide.then(|| vec![0f32; len]);
        let a = self.upload(Side::A, &a_value, rests(a_value.len()).as_deref())?;
        let b = self.upload(Side::B, &b_value, rests(b_value.len()).as_deref())?;
        let sum = pollster::block_on(self.accumulator(m, n))?;
        let shape = Shape { rows, m, n, a_transposed: false, accumulate: false, batch: Batch::ONE };
        let mut seconds = Vec::new();
        for _ in 0..repeats {
            let start = std::time::Instant::now();
            self.queue.submit([self.encode(shape, &a, &b, (&sum.high, &sum.low), syrk).finish()]);
            self.wait()?;
            seconds.push(start.elapsed().as_secs_f64());
        }
        self.check()?;
        Ok(seconds)
    }
}
