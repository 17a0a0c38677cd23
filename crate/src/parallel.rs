//! Data parallelism over index ranges: rayon natively and in the threaded wasm build (feature
//! `threads`: rayon on Web Workers, see `crate::wasm::threads`), the calling thread in the plain wasm build.
//! It sits below both [`crate::kernels`] and [`crate::quant`] (which quantizes activation rows with
//! [`for_each_row_chunk`]) and uses neither.
//!
//! A forward pass runs [`in_pool`]: it holds the pool's workers as a [`team::Team`] for its duration,
//! and the parallel loops inside hand their chunks to that team (see `team.rs` for why).
//!
//! # Design
//!
//! A layer below `kernels` and `quant` that uses neither: rayon natively and in the threaded wasm build, the calling
//! thread in the plain wasm build. `for_each_row_chunk` spreads a prefill batch's row-wise ops over the threads;
//! `LineBuf` is a cache-line-aligned buffer. A decode step is hundreds of loops of a few microseconds, too short to
//! wake sleeping workers each time, so `in_pool` runs a whole forward pass on a pool worker and holds the other workers
//! as a `Team`: they spin until the leader posts a loop and sleep after some tens of microseconds without one. Each
//! member owns a contiguous share of a loop's chunks (the weight rows it streams are one run the prefetcher follows)
//! and takes the others' from the back when done; each member's share and done count sit on cache lines of their
//! own, so claiming from its own share moves no line between cores. The reasons are spelled out in `team.rs`; the costs are measured by
//! `benches/matmul_scaling.mjs` and `benches/thread_steps.mjs`.

use std::ops::Range;

#[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
mod team;

/// Split `0..n` into chunks of `chunk` indices and run `f` on runs of whole chunks (one chunk, several
/// consecutive ones, or all of `0..n` on one thread), possibly in parallel.
#[cfg_attr(all(target_arch = "wasm32", not(feature = "threads")), allow(unused_variables))] // `chunk`: one thread
pub fn for_each_chunk(n: usize, chunk: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    if n > chunk.max(1) {
        let chunk = chunk.max(1);
        let n_chunks = n.div_ceil(chunk);
        let run = |c: Range<usize>| f(c.start * chunk..(c.end * chunk).min(n));
        if n_chunks <= team::MAX_CHUNKS && with_team(|team| team.run(n_chunks, &run)).is_some() {
            return;
        }
        if rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            (0..n_chunks).into_par_iter().for_each(|c| run(c..c + 1));
            return;
        }
    }
    if n > 0 {
        f(0..n);
    }
}

#[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
thread_local! {
    /// The team this thread leads, while it runs a forward pass under [`in_pool`] and is not inside
    /// one of the team's chunks (a loop nested in a chunk goes through rayon).
    static TEAM: std::cell::Cell<*const team::Team> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Run `f` with the team this thread leads, if any (taken away from the thread meanwhile).
#[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
fn with_team<R>(f: impl FnOnce(&team::Team) -> R) -> Option<R> {
    let t = TEAM.with(|t| t.replace(std::ptr::null()));
    if t.is_null() {
        return None;
    }
    struct Restore(*const team::Team);
    impl Drop for Restore {
        fn drop(&mut self) {
            TEAM.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(t);
    // SAFETY: `in_pool` keeps the team alive while TEAM points at it.
    Some(f(unsafe { &*t }))
}

/// Run `f` (a forward pass) on a worker of the kernel thread pool, with the other workers held as a
/// team for the parallel loops inside it. Starting from a worker matters too: a loop started from an
/// outside thread must hand itself to the pool and sleep until it is done.
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    #[cfg(any(not(target_arch = "wasm32"), feature = "threads"))]
    {
        let n = rayon::current_num_threads();
        if n > 1 && TEAM.with(|t| t.get().is_null()) {
            let team = team::Team::new(n);
            return rayon::scope(|s| {
                for helper in 1..n {
                    let team = &team;
                    s.spawn(move |_| team.help(helper));
                }
                // Release the helpers however `f` ends (a panic must not leave them spinning).
                struct Finish<'a>(&'a team::Team);
                impl Drop for Finish<'_> {
                    fn drop(&mut self) {
                        TEAM.with(|t| t.set(std::ptr::null()));
                        self.0.finish();
                    }
                }
                let _finish = Finish(&team);
                TEAM.with(|t| t.set(&team));
                f()
            });
        }
    }
    f()
}

/// Run `f(first_row, rows)` on runs of whole rows of `out` (`row_len` items each), possibly in
/// parallel. For the row-wise ops of a prefill batch (norms, RoPE, SwiGLU, the residual add,
/// quantizing activations): run on one thread they leave the others waiting, and each output line was
/// last written or read by another core anyway. A single row runs inline.
pub fn for_each_row_chunk<T: Send>(out: &mut [T], row_len: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if out.is_empty() {
        return; // rows of no items (an activation row of 0 columns)
    }
    assert!(row_len > 0 && out.len().is_multiple_of(row_len));
    let rows = out.len() / row_len;
    let out = SharedMut::new(out);
    // SAFETY: chunks are disjoint runs of rows.
    for_each_chunk(rows, chunk_size(rows, 1, 16), |r| {
        f(r.start, unsafe { out.slice(r.start * row_len, r.len() * row_len) })
    });
}

/// Chunk size for splitting `n` items over the pool: at least four chunks per thread (for balance),
/// as many for every thread where chunks of at most `max` items allow (so equal chunks end together:
/// 576 rows on two threads are ten chunks of 58, not nine of 64), and at least `min` items each.
pub fn chunk_size(n: usize, min: usize, max: usize) -> usize {
    let t = threads();
    let per_thread = n.div_ceil(max * t).max(4);
    n.div_ceil(per_thread * t).clamp(min, max)
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

/// A zeroed f32 buffer that starts on a 64-byte cache line. Tasks that write runs of 16 floats starting
/// at multiples of 16 (as matmul tasks do) then never write the same cache line from two threads, which
/// would move that line between the cores on every write (false sharing).
pub struct LineBuf {
    lines: Vec<Line>,
    len: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

impl LineBuf {
    pub fn zeros(len: usize) -> LineBuf {
        LineBuf { lines: vec![Line([0.0; 16]); len.div_ceil(16)], len }
    }

    /// The bytes `zeros(len)` allocates (saturating).
    pub fn bytes(len: usize) -> usize {
        len.div_ceil(16).saturating_mul(std::mem::size_of::<Line>())
    }
}

impl std::ops::Deref for LineBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is 16 f32s with no padding (repr(C), 64 bytes), and `len <= 16 * lines.len()`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const f32, self.len) }
    }
}

impl std::ops::DerefMut for LineBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut f32, self.len) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Run `loops` loops of `n` indices inside one forward-like `in_pool` call, each index counted.
    fn count_indices(loops: usize, n: usize, chunk: usize) -> Vec<usize> {
        let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        in_pool(|| {
            for _ in 0..loops {
                for_each_chunk(n, chunk, |r| r.for_each(|i| _ = counts[i].fetch_add(1, Relaxed)));
            }
        });
        counts.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_index_runs_once_per_loop() {
        for (loops, n, chunk) in [(1, 1, 1), (500, 37, 3), (2000, 9, 1), (3, 100_000, 7), (10, 5, 64)] {
            assert!(count_indices(loops, n, chunk).iter().all(|&c| c == loops), "{loops} loops of {n} by {chunk}");
        }
    }

    #[test]
    fn loops_nested_in_a_chunk_run_every_index() {
        let total = AtomicUsize::new(0);
        in_pool(|| {
            for_each_chunk(8, 1, |outer| {
                for _ in outer {
                    for_each_chunk(50, 4, |r| _ = total.fetch_add(r.len(), Relaxed));
                }
            })
        });
        assert_eq!(total.into_inner(), 8 * 50);
    }

    /// Pauses longer than a helper spins, so loops are posted to sleeping helpers too.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn loops_after_long_serial_stretches_run_every_index() {
        let counts: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
        in_pool(|| {
            for pause_us in [0, 2_000, 0, 0, 20_000, 1, 5_000] {
                std::thread::sleep(std::time::Duration::from_micros(pause_us));
                for_each_chunk(64, 1, |r| r.for_each(|i| _ = counts[i].fetch_add(1, Relaxed)));
            }
        });
        assert!(counts.iter().all(|c| c.load(Relaxed) == 7));
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_panicking_chunk_panics_the_caller_and_the_pool_still_works() {
        let caught = std::panic::catch_unwind(|| {
            in_pool(|| for_each_chunk(64, 1, |r| assert!(!r.contains(&40), "chunk 40 fails")));
        });
        assert!(caught.is_err());
        assert!(count_indices(100, 33, 2).iter().all(|&c| c == 100));
    }
}
