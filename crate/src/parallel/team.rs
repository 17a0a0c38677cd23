//! A team of pool workers held for one forward pass, each taking chunks of every parallel loop from
//! its own share of the loop's chunk range.
//!
//! A decode step is hundreds of parallel loops of a few microseconds each. Through rayon every loop
//! must reach the other workers, which fall asleep between loops (on wasm `yield_now` does nothing,
//! so they sleep almost at once) and must be woken (`Atomics.notify` in the browser) each time: the
//! wake-ups eat what a second thread would save. A team wakes the workers once per forward pass
//! instead: each runs [`Team::help`], which spins until the forward pass ends, taking chunks of
//! whatever loop the leader (the thread running the forward pass) has posted.
//!
//! Each member has a contiguous share of a loop's chunks (member `i` of `m`: chunks `n*i/m ..
//! n*(i+1)/m`) and takes them in order from the front, so the weight rows it streams from memory are
//! one run per loop; a member whose share is used up takes chunks from the back of the others'. It
//! takes up to [`MOST_CHUNKS_PER_CLAIM`] at once while its share lasts, then one at a time, so the
//! members end a loop within about one (small) chunk of each other. (Not one shared counter: with it,
//! each thread's weight rows would be runs of one chunk that the hardware prefetcher must find again
//! each time.)
//!
//! The leader never waits for a helper to *arrive*: it takes chunks itself, from the others' shares
//! once its own is done, so a loop finishes even if no helper ever joins (a worker busy elsewhere, a
//! helper job not yet stolen).
//!
//! A helper that finds no work for a while (the leader in a long serial stretch, or another program
//! needing the core) goes to sleep on a condition variable and the leader wakes it with the next loop:
//! spinning forever would steal the core from the leader whenever cores are oversubscribed.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, PoisonError};

/// The loop being run: `f(c0..c1)` runs chunks `c0..c1`.
type Chunks<'a> = &'a (dyn Fn(Range<usize>) + Sync);

/// Bits of a member's share word: loop number (epoch) | next chunk | end.
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const EPOCH_MASK: u64 = (1 << (64 - 2 * INDEX_BITS)) - 1;
/// Most chunks a team loop may have (more go through rayon).
pub const MAX_CHUNKS: usize = INDEX_MASK as usize;
/// Looks at the shares a helper makes before it sleeps: some tens of microseconds, longer than the
/// serial stretches between the loops of a forward pass.
const SPINS_BEFORE_SLEEP: u32 = 20_000;
/// Most chunks a member takes from its own share at once: a quarter of what is left there, at least
/// one. Few claims while much is left, single (small) chunks at the end, so the members end a loop
/// close together; and little work held by a member the others could have taken if it is descheduled.
const MOST_CHUNKS_PER_CLAIM: u64 = 4;

/// A member's part of the team, on cache lines of its own (its share and task on one, its done count
/// on the next): while a loop runs, each member writes only its own lines (others touch the first
/// only to take chunks from the back, at the end of a loop). A waiting helper reads nothing else, so
/// posting a loop moves one line to each helper and none back. A helper must not watch a line of the
/// leader's (the loop's task, the leader's share): each post and the leader's first claims would wait
/// for the helpers' copies of it to be invalidated, a round trip between the cores, in each of the
/// ~150 loops of a decode step (`emptyLoops` in `benches/matmul_scaling.mjs` measures a loop's cost).
#[repr(align(64))]
struct Member {
    /// Its unclaimed chunks of the current loop, `epoch << 40 | next << 20 | end`, or [`QUIT`]. The
    /// owner claims `next` onwards (next + k), the others `end - 1` (end - 1), each with a
    /// compare-exchange of the whole word, so no one can claim a chunk of a loop that has ended (the
    /// epoch would differ: it wraps only after 2^24 loops of one forward pass).
    share: AtomicU64,
    /// The loop's `Chunks` (written before `share`; valid while `share` has unclaimed chunks).
    task: AtomicPtr<()>,
    /// Chunks it has run, over all loops (the leader sums the members' counts), added once it finds
    /// no more to claim.
    done: DoneCount,
}

/// A member's done count, on a line of its own: the leader reads it over and over while waiting for
/// a loop's last chunks, which must not take from the owner the line it claims them on.
#[repr(align(64))]
struct DoneCount(AtomicUsize);

/// A helper's share word once the forward pass is over (the leader stores it after its last loop): next
/// beyond end, which no loop's share ever has, so it holds no chunks and differs from every share.
const QUIT: u64 = INDEX_MASK << INDEX_BITS;

pub struct Team {
    /// [members]: member 0 is the leader, helpers are 1.. (see [`Team::help`]).
    members: Box<[Member]>,
    /// A chunk panicked (natively; on wasm a panic aborts): the leader re-raises it.
    panicked: AtomicBool,
    /// Helpers asleep (or about to be) on `wake`.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Team {
    /// A team of `members` threads: the caller (the leader) and `members - 1` helpers.
    pub fn new(members: usize) -> Team {
        Team {
            members: (0..members.max(1))
                .map(|_| Member {
                    share: AtomicU64::new(0),
                    task: AtomicPtr::new(std::ptr::null_mut()),
                    done: DoneCount(AtomicUsize::new(0)),
                })
                .collect(),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// On helper `me` (1..members): take chunks of posted loops until [`Team::finish`]. It watches only
    /// its own share word: a new epoch there means a new loop, and it takes chunks (its own, then the
    /// others') until none is left.
    pub fn help(&self, me: usize) {
        assert!(me > 0 && me < self.members.len(), "helper {me} of a team of {}", self.members.len());
        let share = &self.members[me].share;
        let (mut seen, mut idle) = (None, 0);
        loop {
            let s = share.load(SeqCst);
            if s == QUIT {
                return;
            }
            if seen != Some(epoch(s)) {
                self.claim_all(me);
                seen = Some(epoch(s));
                idle = 0;
            } else if idle < SPINS_BEFORE_SLEEP {
                idle += 1;
                std::hint::spin_loop();
            } else {
                self.sleep(me, s);
                idle = 0;
            }
        }
    }

    /// Sleep until the leader changes helper `me`'s share word from `seen` (a new loop, or the end).
    fn sleep(&self, me: usize, seen: u64) {
        let share = &self.members[me].share;
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, SeqCst);
        // Looked at after counting ourselves a sleeper: the leader either sees the count (and
        // notifies, under the lock, so not before we wait) or stored the word before it (we see that here).
        let _guard =
            self.wake.wait_while(guard, |_| share.load(SeqCst) == seen).unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_sub(1, SeqCst);
    }

    /// Wake sleeping helpers (after a new loop or the end).
    fn wake_sleepers(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.wake.notify_all();
        }
    }

    /// On the leader: run `f` on chunks `0..n_chunks` (at most [`MAX_CHUNKS`]), in runs of consecutive
    /// chunks, with the helpers, and return when all are done.
    pub fn run(&self, n_chunks: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        assert!(n_chunks <= MAX_CHUNKS);
        // The previous loop is finished (all its chunks claimed and done), so no one still reads a
        // `task` for it, and the members' counts stand still until this loop's chunks run.
        let done = || self.members.iter().map(|m| m.done.0.load(SeqCst)).sum::<usize>();
        let all_done = done() + n_chunks;
        // The loop count lives in the leader's own share word.
        let epoch = (epoch(self.members[0].share.load(SeqCst)) + 1) & EPOCH_MASK;
        let (n, members) = (n_chunks as u64, self.members.len() as u64);
        // Helpers' shares first, the leader's own last: it starts on its share right after.
        for (i, member) in self.members.iter().enumerate().rev() {
            let i = i as u64;
            let (first, end) = (n * i / members, n * (i + 1) / members);
            member.task.store(&f as *const Chunks as *mut (), SeqCst);
            member.share.store(epoch << (2 * INDEX_BITS) | first << INDEX_BITS | end, SeqCst);
        }
        self.wake_sleepers();
        self.claim_all(0);
        while done() < all_done {
            std::hint::spin_loop();
        }
        if self.panicked.load(SeqCst) {
            panic!("a parallel chunk panicked (its message is above)");
        }
    }

    /// On member `me`: claim and run chunks until none is left, then add them to its done count at
    /// once. The leader watches the counts at the end of every loop, while the members still claim
    /// the last chunks one by one: a count per claim (on the share's line) would move that line between
    /// the cores at each claim.
    fn claim_all(&self, me: usize) {
        let mut ran = 0;
        while let Some(n) = self.claim(me) {
            ran += n;
        }
        if ran > 0 {
            self.members[me].done.0.fetch_add(ran, SeqCst);
        }
    }

    /// On member `me`: claim and run one run of chunks of the current loop, from the front of its own
    /// share or else one from the back of another's. Returns how many it ran (0 if another member
    /// claimed first: look again), or `None` when none is left.
    fn claim(&self, me: usize) -> Option<usize> {
        let members = self.members.len();
        for k in 0..members {
            let member = &self.members[(me + k) % members];
            let s = member.share.load(SeqCst);
            let Some((next, end)) = unclaimed(s) else { continue };
            // Read before the claim: if the claim succeeds, the share did not change in between, so
            // the loop was still open and `task` was its task.
            let task = member.task.load(SeqCst) as *const Chunks;
            let (chunks, claimed) = if k == 0 {
                let take = ((end - next) / 4).clamp(1, MOST_CHUNKS_PER_CLAIM);
                (next..next + take, s + (take << INDEX_BITS))
            } else {
                (end - 1..end, s - 1)
            };
            if member.share.compare_exchange(s, claimed, SeqCst, SeqCst).is_err() {
                return Some(0); // someone else claimed from this share (or a new loop began): look again
            }
            // SAFETY: the leader keeps the loop's `Chunks` alive until every claimed chunk is done.
            let f = unsafe { *task };
            let chunks = chunks.start as usize..chunks.end as usize;
            self.run_chunks(f, chunks.clone());
            return Some(chunks.len());
        }
        None
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn run_chunks(&self, f: Chunks, c: Range<usize>) {
        // A panicking helper must still count its chunks done, or the leader would wait forever.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c))).is_err() {
            self.panicked.store(true, SeqCst);
        }
    }

    #[cfg(target_arch = "wasm32")]
    fn run_chunks(&self, f: Chunks, c: Range<usize>) {
        f(c) // panic=abort on wasm: the worker dies and the job's promise is failed by the panic hook
    }

    /// On the leader, after its last loop: release the helpers.
    pub fn finish(&self) {
        for member in &self.members[1..] {
            member.share.store(QUIT, SeqCst);
        }
        self.wake_sleepers();
    }
}

/// The loop number of a share word.
fn epoch(share: u64) -> u64 {
    (share >> (2 * INDEX_BITS)) & EPOCH_MASK
}

/// The `(next, end)` chunks of a share word, if any is unclaimed.
fn unclaimed(share: u64) -> Option<(u64, u64)> {
    let (next, end) = ((share >> INDEX_BITS) & INDEX_MASK, share & INDEX_MASK);
    (next < end).then_some((next, end))
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    /// Loops of every size on a team of `members` of which only `helpers` ever show up: each chunk runs
    /// exactly once per loop, whoever's share it is in (the leader takes the absent members' shares).
    fn run_loops(members: usize, helpers: usize) {
        let team = Team::new(members);
        let sizes: Vec<usize> = (0..40).chain([1000, 4096, 7]).collect();
        let counts: Vec<AtomicUsize> = (0..4096).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for me in 1..=helpers {
                let team = &team;
                s.spawn(move || team.help(me));
            }
            for &n in &sizes {
                team.run(n, &|cs| cs.for_each(|c| _ = counts[c].fetch_add(1, Relaxed)));
            }
            team.finish();
        });
        for (c, count) in counts.iter().enumerate() {
            let want = sizes.iter().filter(|&&n| c < n).count();
            assert_eq!(count.load(Relaxed), want, "chunk {c} with {helpers} of {} helpers", members - 1);
        }
    }

    #[test]
    fn every_chunk_runs_once_whoever_shows_up() {
        for (members, helpers) in [(1, 0), (2, 1), (2, 0), (5, 4), (5, 2), (8, 0)] {
            run_loops(members, helpers);
        }
    }
}
