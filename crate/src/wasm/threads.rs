//! The threaded wasm build (feature `threads`): the kernels' rayon pool runs on Web Workers that
//! share this module's memory (wasm-bindgen-rayon; the npm package calls `initThreadPool(n)` first).
//!
//! A browser page's main thread must never block (`memory.atomic.wait32` traps there), and a rayon
//! loop started from outside the pool blocks its caller until the loop is done. So the engine's
//! forward passes run as jobs *on* a pool worker (which then takes part in its own loops, as natively
//! with `in_pool`), and JS gets a Promise that settles when the job is done. The main thread only
//! ever takes locks with `try_lock`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::task::{Context, Poll, Waker};

use wasm_bindgen::JsValue;

pub use wasm_bindgen_rayon::init_thread_pool;

/// The outcome of a pool job: its value, or the message of the panic that killed its worker.
type Outcome<T> = Result<T, String>;

struct Slot<T> {
    state: Mutex<(Option<Outcome<T>>, Option<Waker>)>,
}

impl<T> Slot<T> {
    /// Called on the worker (which may block on this lock for the instant the main thread holds it).
    fn complete(&self, outcome: Outcome<T>) {
        let waker = {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if s.0.is_some() {
                return;
            }
            s.0 = Some(outcome);
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The job's result, awaited on the calling (main) thread.
struct Done<T>(Arc<Slot<T>>);

impl<T> Future for Done<T> {
    type Output = Outcome<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<T>> {
        let mut s: MutexGuard<_> = match self.0.state.try_lock() {
            Ok(s) => s,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                cx.waker().wake_by_ref(); // the worker is storing the result: look again soon
                return Poll::Pending;
            }
        };
        match s.0.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

thread_local! {
    /// On a pool worker running a job: how to fail that job if it panics (with panic=abort the worker
    /// dies, so the panic hook is the last chance to settle the job's Promise).
    static FAIL_JOB: RefCell<Option<Box<dyn FnOnce(String)>>> = const { RefCell::new(None) };
}

/// From the panic hook: if this thread runs a pool job, fail it with `message`.
pub fn fail_running_job(message: &str) {
    if let Some(fail) = FAIL_JOB.with(|f| f.borrow_mut().take()) {
        fail(message.to_string());
    }
}

/// Run `work` on a pool worker and return a Promise of `to_js` of its result (`to_js` runs back on
/// the calling thread, where JS values live). A panic rejects with a plain `Error` (no `code`), which
/// the npm package reports as a crashed engine.
pub fn on_pool<T: Send + 'static>(
    work: impl FnOnce() -> crate::Result<T> + Send + 'static,
    to_js: impl FnOnce(T) -> Result<JsValue, JsValue> + 'static,
) -> js_sys::Promise {
    let slot = Arc::new(Slot { state: Mutex::new((None, None)) });
    let job_slot = slot.clone();
    rayon::spawn(move || {
        let panic_slot = job_slot.clone();
        FAIL_JOB.with(|f| *f.borrow_mut() = Some(Box::new(move |m| panic_slot.complete(Err(m)))));
        let value = work();
        FAIL_JOB.with(|f| f.borrow_mut().take());
        job_slot.complete(Ok(value));
    });
    wasm_bindgen_futures::future_to_promise(async move {
        match Done(slot).await {
            Ok(Ok(value)) => to_js(value),
            Ok(Err(e)) => Err(super::js_error(e)),
            Err(panic) => Err(js_sys::Error::new(&format!("the engine panicked on a worker thread: {panic}")).into()),
        }
    })
}
