//! The completion queue: one thread per process that receives the signals of the host
//! functions, wakes the futures waiting for them and releases the payloads of dropped
//! futures.
//!
//! Why a thread of its own rather than waking from the host function: the host function
//! runs on the driver's callback thread, where no CUDA call is allowed, and a waker is
//! foreign code (an executor's), as is a payload's `Drop` (which may free device memory).
//! The host function therefore only sends the signal here; this thread, which may call
//! CUDA and may block on nothing but its queue, does the rest. It is not an executor
//! thread: while it waits for the next signal, it sleeps (no polling).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, OnceLock};

use super::completion::Signal;
use crate::error::{Error, Result};

/// The sending end of the queue, made with the thread on first use.
static QUEUE: OnceLock<Sender<Arc<Signal>>> = OnceLock::new();

/// Starts the completion thread if it is not running yet. Called before any host
/// function is enqueued, so that the host function finds the queue made.
pub(super) fn ensure_started() -> Result<()> {
    if QUEUE.get().is_some() {
        return Ok(());
    }
    let (send, receive) = channel::<Arc<Signal>>();
    // Two threads may race here: each starts a thread, one sender is kept, and the
    // other thread ends at once (its channel has no sender left).
    std::thread::Builder::new()
        .name("stream-core-completion".to_owned())
        .spawn(move || {
            for signal in receive {
                // A panicking waker or payload `Drop` must not stop the completions of
                // every other future.
                let finished =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| signal.finish()));
                if finished.is_err() {
                    eprintln!(
                        "stream_core: a waker or a dropped future's value panicked on the \
                         completion thread; the panic was ignored"
                    );
                }
            }
        })
        .map_err(|e| Error::CompletionThread {
            reason: e.to_string(),
        })?;
    let _ = QUEUE.set(send);
    Ok(())
}

/// Sends `signal` to the completion thread. Called by the host function, on the
/// driver's thread: it never blocks and makes no CUDA call; if the queue is gone (it is
/// never closed), the signal is leaked, not dropped here.
pub(super) fn send_from_host_function(signal: Arc<Signal>) {
    match QUEUE.get() {
        Some(queue) => {
            if let Err(unsent) = queue.send(signal) {
                std::mem::forget(unsent.0);
            }
        }
        None => std::mem::forget(signal),
    }
}
