//! Work split across every core natively, through rayon (whose pool faer's products already
//! use), and done in turn in the tab, where each worker of the pool is one thread. Each item is
//! computed alone, so the split changes no number.

#[cfg(not(target_arch = "wasm32"))]
use rayon::prelude::*;

/// What several threads may read at once natively (`Sync`), and hand to another thread
/// (`Send`: the Python package computes off the interpreter's thread); every type in the tab,
/// where each worker is one thread (its file handles are JavaScript objects, which are neither).
#[cfg(not(target_arch = "wasm32"))]
pub trait Shareable: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + ?Sized> Shareable for T {}
#[cfg(target_arch = "wasm32")]
pub trait Shareable {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> Shareable for T {}

/// `each(item)` of every item, in order.
pub fn map_each<I: Sync, T: Send>(items: &[I], each: impl Fn(&I) -> T + Sync + Send) -> Vec<T> {
    #[cfg(not(target_arch = "wasm32"))]
    return items.par_iter().map(each).collect();
    #[cfg(target_arch = "wasm32")]
    items.iter().map(each).collect()
}

/// `each(start, chunk)` over `items` cut into chunks of `size` (the last may be shorter), where
/// `start` is the chunk's first index.
pub fn each_chunk<T: Send>(items: &mut [T], size: usize, each: impl Fn(usize, &mut [T]) + Sync + Send) {
    let size = size.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    items.par_chunks_mut(size).enumerate().for_each(|(i, chunk)| each(i * size, chunk));
    #[cfg(target_arch = "wasm32")]
    items.chunks_mut(size).enumerate().for_each(|(i, chunk)| each(i * size, chunk));
}
