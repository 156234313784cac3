//! A minimal async executor for the workspace's tests and benchmarks: worker threads
//! sharing one queue of tasks ([`Executor`]), and [`block_on`] for one future on the
//! calling thread.
//!
//! It exists to show that `stream_core`'s futures need nothing from an executor but a
//! [`Waker`]: the async tests run on it as well as on tokio, and the benchmark's cost
//! rows await with its `block_on`, so that they measure `stream_core` rather than a
//! runtime. It is small on purpose: one `Mutex`-guarded queue, a
//! `Condvar`, tasks that are `Arc`s implementing [`Wake`], and no `unsafe`.
//!
//! ```
//! let executor = mini_executor::Executor::new(2);
//! let task = executor.spawn(async { 40 + 2 });
//! assert_eq!(task.join().ok(), Some(42));
//! assert_eq!(mini_executor::block_on(async { 7 }), 7);
//! ```
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

/// A pinned, boxed task future.
type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// `lock` that ignores poisoning (a task's panic is caught and reported, never left in
/// a lock).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Worker threads polling spawned tasks from one shared queue. Dropping it stops the
/// workers (after the task each is polling) and drops the tasks left in the queue.
pub struct Executor {
    shared: Arc<Shared>,
    workers: Vec<thread::JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<VecDeque<Arc<Task>>>,
    available: Condvar,
    closing: AtomicBool,
}

/// A spawned future and whether it is already in the queue.
struct Task {
    future: Mutex<Option<TaskFuture>>,
    scheduled: AtomicBool,
    shared: Weak<Shared>,
}

impl Task {
    /// Puts the task in the queue unless it is there already.
    fn schedule(self: Arc<Self>) {
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.queue).push_back(self);
            shared.available.notify_one();
        }
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        Arc::clone(self).schedule();
    }
}

impl Executor {
    /// An executor with `threads` worker threads (at least one).
    ///
    /// # Panics
    ///
    /// When a worker thread cannot be started.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            available: Condvar::new(),
            closing: AtomicBool::new(false),
        });
        let workers = (0..threads.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("mini-executor-{i}"))
                    .spawn(move || work(&shared))
                    .expect("mini-executor: could not start a worker thread")
            })
            .collect();
        Executor { shared, workers }
    }

    /// How many worker threads it runs.
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Runs `future` on the workers; the handle gives its output, or its panic.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let slot = Arc::new(JoinSlot {
            state: Mutex::new(JoinState {
                output: None,
                waker: None,
            }),
            finished: Condvar::new(),
        });
        let reporting = Reporting {
            future: Box::pin(future),
            slot: Arc::clone(&slot),
        };
        let task = Arc::new(Task {
            future: Mutex::new(Some(Box::pin(reporting))),
            scheduled: AtomicBool::new(false),
            shared: Arc::downgrade(&self.shared),
        });
        task.schedule();
        JoinHandle { slot }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.available.notify_all();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        let left: Vec<_> = lock(&self.shared.queue).drain(..).collect();
        drop(left);
    }
}

/// A worker: polls queued tasks until the executor closes.
fn work(shared: &Shared) {
    loop {
        let task = {
            let mut queue = lock(&shared.queue);
            loop {
                if shared.closing.load(Ordering::Acquire) {
                    return;
                }
                if let Some(task) = queue.pop_front() {
                    break task;
                }
                queue = shared
                    .available
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        // Cleared before the poll, so that a wake during the poll queues it again.
        task.scheduled.store(false, Ordering::Release);
        let waker = Waker::from(Arc::clone(&task));
        let mut slot = lock(&task.future);
        if let Some(future) = slot.as_mut() {
            // `Reporting` catches the task's own panics; this only guards the worker.
            let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                future.as_mut().poll(&mut Context::from_waker(&waker))
            }));
            if !matches!(polled, Ok(Poll::Pending)) {
                *slot = None;
            }
        }
    }
}

/// Polls a spawned future and reports its output, or its panic, to the join handle.
struct Reporting<F: Future> {
    future: Pin<Box<F>>,
    slot: Arc<JoinSlot<F::Output>>,
}

impl<F: Future> Future for Reporting<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| this.future.as_mut().poll(cx)));
        let output = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(value)) => Ok(value),
            Err(panic) => Err(panic),
        };
        let waker = {
            let mut state = lock(&this.slot.state);
            state.output = Some(output);
            state.waker.take()
        };
        this.slot.finished.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
        Poll::Ready(())
    }
}

struct JoinSlot<T> {
    state: Mutex<JoinState<T>>,
    finished: Condvar,
}

struct JoinState<T> {
    output: Option<thread::Result<T>>,
    waker: Option<Waker>,
}

/// The output of a spawned task: [`join`](Self::join) it from a plain thread, or await
/// it from another task. `Err` holds the task's panic.
pub struct JoinHandle<T> {
    slot: Arc<JoinSlot<T>>,
}

impl<T> JoinHandle<T> {
    /// Blocks the calling thread until the task has finished.
    pub fn join(self) -> thread::Result<T> {
        let mut state = lock(&self.slot.state);
        loop {
            if let Some(output) = state.output.take() {
                return output;
            }
            state = self
                .slot
                .finished
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// `true` once the task has finished.
    pub fn is_finished(&self) -> bool {
        lock(&self.slot.state).output.is_some()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = thread::Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = lock(&self.slot.state);
        match state.output.take() {
            Some(output) => Poll::Ready(output),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Unparks the thread that runs [`block_on`].
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on the calling thread, parking it while the future is
/// pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Pending once, waking itself from another thread, then ready.
    struct WokenFromElsewhere(bool);

    impl Future for WokenFromElsewhere {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            if self.0 {
                return Poll::Ready(5);
            }
            self.0 = true;
            let waker = cx.waker().clone();
            thread::spawn(move || waker.wake());
            Poll::Pending
        }
    }

    #[test]
    fn spawned_tasks_run_and_report_their_output() {
        let executor = Executor::new(3);
        let count = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..100)
            .map(|i| {
                let count = Arc::clone(&count);
                executor.spawn(async move {
                    let v = WokenFromElsewhere(false).await;
                    count.fetch_add(1, Ordering::Relaxed);
                    i + v
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().ok(), Some(i as u32 + 5));
        }
        assert_eq!(count.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_panicking_task_reports_its_panic_and_the_workers_go_on() {
        let executor = Executor::new(1);
        let bad = executor.spawn(async { panic!("boom") });
        assert!(bad.join().is_err());
        let good = executor.spawn(async { 1 });
        assert_eq!(good.join().ok(), Some(1));
    }

    #[test]
    fn join_handles_can_be_awaited_and_block_on_wakes() {
        let executor = Executor::new(2);
        let inner = executor.spawn(async { 3 });
        let outer = executor.spawn(async move { inner.await.ok().map(|v| v * 2) });
        assert_eq!(outer.join().ok(), Some(Some(6)));
        assert_eq!(block_on(WokenFromElsewhere(false)), 5);
    }
}
