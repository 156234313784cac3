//! Host functions (`cuLaunchHostFunc`): a callback the driver runs on a thread of its own
//! once the work enqueued on a stream before it has completed.
//!
//! What the driver documents, and what [`HostCallback`] implementations must keep:
//! "The host function must not make any CUDA API calls. Attempting to use a CUDA API may
//! result in `CUDA_ERROR_NOT_PERMITTED`, but this is not required. The host function must
//! not perform any synchronization that may depend on outstanding CUDA work not mandated
//! to run earlier." Work enqueued on the stream after the host function waits until it
//! returns, and "the start of execution of the function has the same effect as
//! synchronizing an event recorded in the same stream immediately prior to the
//! function": when it runs, everything enqueued before it has completed. Unlike
//! `cuStreamAddCallback`'s, a host function is not called at all once the context has
//! stopped with an error, so a callback can only ever report success.

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;

use cudarc::driver::sys;

use super::stream::RawStream;
use crate::error::{DriverResultExt, Result};

/// What the driver calls, at most once, on its own thread, after the work enqueued on a
/// stream before it ([`launch_host_callback`]).
///
/// # Safety
///
/// [`run`](Self::run) makes no CUDA call (directly or through code it calls, dropping
/// values included), waits for no GPU work, and returns promptly: the stream is stalled
/// until it returns, and the driver forbids CUDA calls on its callback thread.
pub(crate) unsafe trait HostCallback: Send + 'static {
    /// Called at most once, on the driver's callback thread. A panic aborts the process
    /// (it cannot unwind into the driver).
    fn run(self: Box<Self>);
}

/// Enqueues `callback` on `stream`: the driver calls [`HostCallback::run`] once every
/// piece of work enqueued on `stream` before this call has completed. After a sticky
/// error it is never called, and the box is leaked.
///
/// On `Err` the callback is not run, and its box is leaked rather than freed: the driver
/// does not document what a failed enqueue leaves behind, and a leak is the one outcome
/// that stays sound if it ran after all.
pub(crate) fn launch_host_callback<C: HostCallback>(
    stream: &RawStream,
    callback: Box<C>,
) -> Result<()> {
    let data = Box::into_raw(callback).cast::<c_void>();
    // SAFETY: `stream` is a live stream (borrowed). `trampoline::<C>` is a host function
    // that calls only `C::run`, which makes no CUDA call and waits for no GPU work
    // (`HostCallback`'s contract), and it never unwinds into the driver (it aborts
    // instead). `data` is a `Box<C>` given up by `into_raw`, which the trampoline takes
    // back when the driver calls it, at most once; on failure it is never freed.
    unsafe { sys::cuLaunchHostFunc(stream.raw(), Some(trampoline::<C>), data) }
        .result()
        .call("cuLaunchHostFunc")
}

/// The host function the driver calls: takes the callback's box back and runs it.
unsafe extern "C" fn trampoline<C: HostCallback>(data: *mut c_void) {
    // SAFETY: `data` came from `Box::into_raw` of a `Box<C>` in `launch_host_callback`
    // (the only place that passes this trampoline), and the driver calls a host function
    // at most once, so the box is taken back at most once.
    let callback = unsafe { Box::from_raw(data.cast::<C>()) };
    if std::panic::catch_unwind(AssertUnwindSafe(|| callback.run())).is_err() {
        eprintln!("stream_core: aborting: a host function panicked on the CUDA driver's thread");
        std::process::abort();
    }
}
