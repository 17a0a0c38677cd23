//! Data parallelism over index ranges: rayon natively and in the threaded wasm build (feature
//! `threads`: rayon on Web Workers, see `crate::wasm_threads`), the calling thread in the plain wasm build.

use std::ops::Range;

/// Split `0..n` into chunks of `chunk` indices and run `f` on each, possibly in parallel.
pub fn for_each_chunk(n: usize, chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    let chunk = chunk.max(1);
    let n_chunks = n.div_ceil(chunk);
    let run = |c: usize| f(c * chunk..((c + 1) * chunk).min(n));
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    {
        use rayon::prelude::*;
        if n_chunks > 1 && rayon::current_num_threads() > 1 {
            (0..n_chunks).into_par_iter().for_each(run);
            return;
        }
    }
    (0..n_chunks).for_each(run);
}

/// Run `f` on a worker of the kernel thread pool (natively, with more than one thread). The parallel
/// loops inside `f` then start from a worker, which keeps working on its share, instead of from an
/// outside thread that must hand each loop to the pool and sleep until it is done: with decode's
/// hundreds of short loops per token, those hand-offs cost more than the second thread gained.
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if rayon::current_num_threads() > 1 && rayon::current_thread_index().is_none() {
        return rayon::scope(|_| f());
    }
    f()
}

/// Chunk size for splitting `n` items over the pool: about four chunks per thread (for balance), at
/// least `min` items each (to amortize scheduling) and at most `max`, rounded to a multiple of `multiple`.
pub fn chunk_size(n: usize, min: usize, max: usize, multiple: usize) -> usize {
    let per = n.div_ceil(4 * threads()).clamp(min, max);
    per.div_ceil(multiple) * multiple
}

/// A raw pointer that parallel tasks may share to write *disjoint* parts of one output buffer.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(*mut T);

// SAFETY: users only write disjoint indices from different tasks (documented at each use).
unsafe impl<T> Send for SharedMut<T> {}
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        SharedMut(s.as_mut_ptr())
    }

    /// # Safety
    /// `i` is in bounds of the slice this was made from, and no other task writes index `i`.
    #[inline]
    pub unsafe fn write(self, i: usize, v: T) {
        *self.0.add(i) = v;
    }
}

impl<T> SharedMut<T> {
    /// # Safety
    /// `start..start+len` is in bounds of the slice this was made from, and no other task touches it.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

/// Use `n` worker threads for the kernels (natively; 0 = one per core). Call before the first
/// forward pass; later calls have no effect.
#[cfg(not(target_arch = "wasm32"))]
pub fn set_threads(n: usize) -> crate::Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| crate::Error::InvalidArgument(format!("cannot start {n} threads: {e}")))
}

/// Worker threads the kernels use.
pub fn threads() -> usize {
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    return rayon::current_num_threads();
    #[cfg(all(target_arch = "wasm32", not(feature = "threads")))]
    return 1;
}
