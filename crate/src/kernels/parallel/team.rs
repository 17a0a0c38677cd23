//! A team of pool workers held for one forward pass, spinning on a shared counter for the chunks of
//! each parallel loop.
//!
//! A decode step is hundreds of parallel loops of a few microseconds each. Through rayon every loop
//! must reach the other workers, which fall asleep between loops (on wasm `yield_now` does nothing,
//! so they sleep almost at once) and must be woken (`Atomics.notify` in the browser) each time: the
//! second thread gained nothing. A team wakes the workers once per forward pass instead: each runs
//! [`Team::help`], which spins until the forward pass ends, taking chunks of whatever loop the
//! leader (the thread running the forward pass) has posted.
//!
//! The leader never waits for a helper to *arrive*: it takes chunks itself, so a loop finishes even if
//! no helper ever joins (a worker busy elsewhere, a helper job not yet stolen).
//!
//! A helper that finds no work for a while (the leader in a long serial stretch, or another program
//! needing the core) goes to sleep on a condition variable and the leader wakes it with the next loop:
//! spinning forever would steal the core from the leader whenever cores are oversubscribed.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, PoisonError};

/// The loop being run: chunk `c` runs `f(c)`.
type Chunk<'a> = &'a (dyn Fn(usize) + Sync);

/// Bits of [`Team::state`]: loop number (epoch) | chunk count | next chunk to claim.
const INDEX_BITS: u32 = 16;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// Most chunks a team loop may have (more go through rayon).
pub const MAX_CHUNKS: usize = INDEX_MASK as usize;
/// Looks at the state a helper makes before it sleeps: some tens of microseconds, longer than the
/// serial stretches between the loops of a forward pass.
const SPINS_BEFORE_SLEEP: u32 = 20_000;

pub struct Team {
    /// `epoch << 32 | n_chunks << 16 | next`. A helper claims chunk `next` of loop `epoch` with a
    /// compare-exchange on the whole word, so it can never claim a chunk of a loop that has ended.
    state: AtomicU64,
    /// Points at the leader's `Chunk` of the current loop (valid while that loop has unclaimed chunks).
    task: AtomicPtr<()>,
    /// Chunks of the current loop finished.
    done: AtomicUsize,
    /// A chunk panicked (natively; on wasm a panic aborts): the leader re-raises it.
    panicked: AtomicBool,
    /// The forward pass is over: helpers return.
    quit: AtomicBool,
    /// Helpers asleep (or about to be) on `wake`.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Team {
    pub fn new() -> Team {
        Team {
            state: AtomicU64::new(0),
            task: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// On a helper: take chunks of posted loops until [`Team::finish`].
    pub fn help(&self) {
        let mut idle = 0;
        while !self.quit.load(SeqCst) {
            if self.claim_one() {
                idle = 0;
            } else if idle < SPINS_BEFORE_SLEEP {
                idle += 1;
                std::hint::spin_loop();
            } else {
                self.sleep();
                idle = 0;
            }
        }
    }

    /// Sleep until the leader posts a loop or finishes (whichever changes the state first).
    fn sleep(&self) {
        let seen = self.state.load(SeqCst);
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, SeqCst);
        // Looked at after counting ourselves a sleeper: the leader either sees the count (and
        // notifies, under the lock, so not before we wait) or posted before it (we see that here).
        let _guard = self
            .wake
            .wait_while(guard, |_| self.state.load(SeqCst) == seen && !self.quit.load(SeqCst))
            .unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_sub(1, SeqCst);
    }

    /// Wake sleeping helpers (after a change of the state or `quit`).
    fn wake_sleepers(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.wake.notify_all();
        }
    }

    /// On the leader: run `f` on chunks `0..n_chunks` (at most [`MAX_CHUNKS`]) with the helpers, and
    /// return when all are done.
    pub fn run(&self, n_chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(n_chunks <= MAX_CHUNKS);
        // The previous loop is finished (all its chunks claimed and done), so no helper still reads
        // `task` or bumps `done` for it.
        self.task.store(&f as *const Chunk as *mut (), SeqCst);
        self.done.store(0, SeqCst);
        let epoch = (self.state.load(SeqCst) >> 32) + 1;
        self.state.store(epoch << 32 | (n_chunks as u64) << INDEX_BITS, SeqCst);
        self.wake_sleepers();
        while self.claim_one() {}
        while self.done.load(SeqCst) < n_chunks {
            std::hint::spin_loop();
        }
        if self.panicked.load(SeqCst) {
            panic!("a parallel chunk panicked (its message is above)");
        }
    }

    /// Claim and run one chunk of the current loop; false when it has none left.
    fn claim_one(&self) -> bool {
        let s = self.state.load(SeqCst);
        let (n, next) = ((s >> INDEX_BITS) & INDEX_MASK, s & INDEX_MASK);
        if next >= n {
            return false;
        }
        // Read before the claim: if the claim succeeds, the state did not change in between, so the
        // loop was still open and `task` was its task.
        let task = self.task.load(SeqCst) as *const Chunk;
        if self.state.compare_exchange(s, s + 1, SeqCst, SeqCst).is_err() {
            return true; // someone else claimed it (or a new loop began): look again
        }
        // SAFETY: the leader keeps the loop's `Chunk` alive until every claimed chunk is done.
        let f = unsafe { *task };
        self.run_chunk(f, next as usize);
        self.done.fetch_add(1, SeqCst);
        true
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn run_chunk(&self, f: Chunk, c: usize) {
        // A panicking helper must still count its chunk done, or the leader would wait forever.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c))).is_err() {
            self.panicked.store(true, SeqCst);
        }
    }

    #[cfg(target_arch = "wasm32")]
    fn run_chunk(&self, f: Chunk, c: usize) {
        f(c) // panic=abort on wasm: the worker dies and the job's promise is failed by the panic hook
    }

    /// On the leader, after its last loop: release the helpers.
    pub fn finish(&self) {
        self.quit.store(true, SeqCst);
        self.wake_sleepers();
    }
}
