//! The two executors the async tests run on, behind one small interface: tokio's
//! multi-threaded runtime, and the workspace's minimal hand-written `mini-executor`.
//! `stream_core`'s futures need nothing from either but a `Waker`, so every test runs
//! the same code on both. Also the tasks the waiting tests spawn: a `run_owned` of a
//! spinning kernel, and how a task's result becomes the test's.

use std::future::Future;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gpu_tests::{ensure, panic_message, spin, Failed, TestResult};
use stream_core::{Error, Stream};

/// Which executor a test runs on.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Tokio,
    Mini,
}

/// Worker threads that run spawned tasks.
pub enum Workers {
    Tokio(tokio::runtime::Runtime),
    Mini(mini_executor::Executor),
}

/// A spawned task's output, joined from the test thread.
pub enum Task<T> {
    Tokio(tokio::runtime::Handle, tokio::task::JoinHandle<T>),
    Mini(mini_executor::JoinHandle<T>),
}

impl Workers {
    /// `threads` workers of `kind`.
    pub fn new(kind: Kind, threads: usize) -> std::io::Result<Self> {
        match kind {
            Kind::Tokio => Self::tokio(threads),
            Kind::Mini => Ok(Self::mini(threads)),
        }
    }

    /// tokio's multi-threaded runtime with `threads` workers (and nothing else enabled:
    /// no timers, no I/O driver; the futures do not need them).
    pub fn tokio(threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("test-tokio-worker")
            .build()?;
        Ok(Self::Tokio(runtime))
    }

    /// The workspace's minimal executor with `threads` workers.
    pub fn mini(threads: usize) -> Self {
        Self::Mini(mini_executor::Executor::new(threads))
    }

    /// Which executor, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Tokio(_) => "tokio",
            Self::Mini(_) => "mini-executor",
        }
    }

    /// Runs `future` on the worker threads.
    pub fn spawn<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Self::Tokio(runtime) => Task::Tokio(runtime.handle().clone(), runtime.spawn(future)),
            Self::Mini(executor) => Task::Mini(executor.spawn(future)),
        }
    }
}

impl<T> Task<T> {
    /// Blocks the test thread until the task has finished; `Err` holds its panic.
    pub fn join(self) -> thread::Result<T> {
        match self {
            Self::Tokio(runtime, handle) => runtime.block_on(handle).map_err(|error| {
                if error.is_panic() {
                    error.into_panic()
                } else {
                    Box::new(format!("the tokio task did not finish: {error}"))
                }
            }),
            Self::Mini(handle) => handle.join(),
        }
    }
}

/// `threads` workers of `kind`, or the reason there are none as the test's failure.
pub fn start(kind: Kind, threads: usize) -> TestResult<Workers> {
    Workers::new(kind, threads)
        .map_err(|e| Failed::from(format!("cannot start {kind:?} with {threads} workers: {e}")))
}

/// Spawns on `executor` a `run_owned` of a kernel spinning `cycles` on `stream`; the task
/// resolves to the instant the future resolved.
pub fn spawn_spin(
    executor: &Workers,
    stream: Arc<Stream>,
    cycles: u64,
) -> Task<Result<Instant, Error>> {
    executor.spawn(async move {
        stream
            .run_owned((), |s, ()| spin(s, cycles))
            .await
            .map(|_| Instant::now())
    })
}

/// The value of a task, its panic or its error as the test's failure.
pub fn joined<T>(task: Task<Result<T, Error>>) -> TestResult<T> {
    Ok(task
        .join()
        .map_err(|p| Failed::from(panic_message(p.as_ref())))??)
}

/// After a warm-up (the spin kernel's module, the completion thread and, where `short`
/// has the head-of-line bypass on, the doorbell thread, which the first operation
/// handed over while another stream has work starts), on a one-worker `kind` executor:
/// a one-second kernel's `run_owned` on `long`, then,
/// 50 ms later (the completion thread is waiting on it by then), a short one's on
/// `short`. Returns how long after the start each resolved, short first; fails when the
/// long one resolved within 300 ms (it did not wait for the GPU: nothing is proven) or
/// the short one not well before it (it was held behind the long one), naming `what`.
pub fn short_resolves_before_long(
    kind: Kind,
    long: &Arc<Stream>,
    short: &Arc<Stream>,
    what: &str,
) -> TestResult<(Duration, Duration)> {
    let warm = long.run_owned((), |s, ()| spin(s, super::SPIN));
    mini_executor::block_on(short.run_owned((), |s, ()| spin(s, 1)))?;
    mini_executor::block_on(warm)?;
    let executor = start(kind, 1)?;
    let begin = Instant::now();
    let long_task = spawn_spin(&executor, Arc::clone(long), super::LONG_SPIN);
    std::thread::sleep(Duration::from_millis(50));
    let short_task = spawn_spin(&executor, Arc::clone(short), 1);
    let short_done = joined(short_task)?;
    let long_done = joined(long_task)?;
    let (short_after, long_after) = (
        short_done.duration_since(begin),
        long_done.duration_since(begin),
    );
    ensure!(
        long_after > Duration::from_millis(300),
        "the one-second kernel's future resolved after {long_after:?}: it did not wait for \
         the GPU, so the test proves nothing"
    );
    ensure!(
        short_done < long_done && short_after < Duration::from_millis(250),
        "{} ({what}): the short operation resolved {short_after:?} after the start and the \
         long one {long_after:?}: the short one was held behind the long one",
        executor.name()
    );
    Ok((short_after, long_after))
}
