//! Raw handles for code outside this crate that calls CUDA libraries itself (a cuBLAS
//! wrapper, a benchmark against raw driver calls), per-device state for such libraries,
//! and the conversions from and to cudarc's context, streams and slices ([below](#cudarc)).
//!
//! Owns: the raw-handle accessors, `ContextBinding`, per-device extensions, a stream's
//! scratch memory for library workspaces ([`with_stream_scratch`]),
//! `Device::from_cudarc`/`cudarc_context`, `Stream::from_cudarc`,
//! `DeviceVec::from_cudarc`/`into_cudarc` and [`FromCudarcError`]. Uses: `driver/` (its
//! cudarc bridge, a stream's scratch), `device/`, `memory/`, `scope/`, `error`; nothing
//! below uses it.
//!
//! Reading a handle is safe: a `CUstream` or a device address does nothing on its own,
//! and every use of one goes through an `unsafe` driver or library call, whose caller
//! then proves what the safety model needs: work on [`raw_stream`] is ordered like the
//! scope's own work and covered by its final synchronisation; memory from
//! [`device_ptr`] is only read and memory from [`device_ptr_mut`] only written through
//! that handle for the duration of the borrow, on the scope's stream; memory lent by
//! [`with_stream_scratch`] is used only by work enqueued on the scope's stream while it
//! is lent.
//!
//! ```no_run
//! use stream_core::{interop, scope, Device, Error};
//! # fn main() -> stream_core::Result<()> {
//! let dev = Device::new(0)?;
//! let stream = dev.new_stream()?;
//! scope(&stream, |s| {
//!     let mut x = s.alloc_zeroed::<f32>(256)?;
//!     let raw_stream = interop::raw_stream(s);       // for a library's `set_stream`
//!     let ptr = interop::device_ptr_mut(&mut x);     // for its output argument
//!     println!("{raw_stream:?} {ptr:#x}");
//!     Ok::<_, Error>(())
//! })?;
//! # Ok(()) }
//! ```
//!
//! # cudarc
//!
//! Code written against cudarc's safe API (candle, most Rust CUDA programs) adopts this
//! crate piece by piece: its values convert both ways, without copies, and run side by
//! side with scopes on the same GPU (the guide: [`crate::docs::coming_from_cudarc`]).
//!
//! | cudarc | this crate | cost |
//! |---|---|---|
//! | `Arc<CudaContext>` | [`Device::from_cudarc`], back with [`Device::cudarc_context`] | handle comparisons; the device is made once per context |
//! | `Arc<CudaStream>` | [`Stream::from_cudarc`](crate::Stream::from_cudarc): the same `CUstream` | handle comparisons |
//! | `CudaSlice<T>` | [`DeviceVec::from_cudarc`](crate::DeviceVec::from_cudarc), back with [`DeviceVec::into_cudarc`](crate::DeviceVec::into_cudarc): the same allocation | a few event records and waits on the GPU; the host never waits |
//!
//! **cudarc's event tracking is honoured, never bypassed.** Once a cudarc context has a
//! second stream, every `CudaSlice` carries a read and a write event recorded after its
//! last uses, on whichever cudarc streams they ran. [`DeviceVec::from_cudarc`](crate::DeviceVec::from_cudarc) makes the
//! slice's own stream wait for both (cudarc's `CudaSlice::leak`, the waits cudarc's own
//! drop makes before freeing) and records a *ready* event there; the device's
//! housekeeping stream waits for it at once, and each scope that attaches the vec waits
//! for it on its own stream, on the GPU. So when a slice was last written by a long
//! kernel on *another* cudarc stream, a scope's download of the converted vec runs after
//! that kernel, and the host never blocks on it (`tests/test_cudarc.rs` checks this behind
//! a kernel of about 100 ms). [`DeviceVec::into_cudarc`](crate::DeviceVec::into_cudarc) orders the receiving stream after
//! every earlier use and records the new slice's write event there, so cudarc's uses on
//! its other streams wait too. Where a context does not track events (a single stream,
//! or the `unsafe` `disable_event_tracking`), only the slice's own stream is waited for,
//! as cudarc itself would.
//!
//! Conversions accept only the concrete cudarc types, never cudarc's `DevicePtr`-style
//! traits (a user implementation could forge addresses). Each binds the device's
//! context around the cudarc calls it makes, so cudarc (which binds with
//! `cuCtxSetCurrent`) finds its context current and the thread gets its previous context
//! back. What is refused, with [`Error::CudarcConversion`](crate::Error::CudarcConversion) saying why: non-primary contexts,
//! the per-thread default stream, the default stream as a [`Stream`](crate::Stream) (its
//! handle means whichever context is current; slices on it convert), and slices of
//! contexts that allocate with `cuMemAlloc` (freeing them waits for the whole device).
//! A refused slice is given back ([`FromCudarcError`]).
//!
//! **Graph captures and cudarc's device-wide synchronisations.** A few of cudarc's calls
//! synchronise the whole device (`CudaContext::synchronize`, and `new_stream` when an
//! event-tracking context makes its first stream). Made while a capture
//! ([`Device::capture`]) runs on another thread, the driver refuses them and invalidates
//! the capture, which then ends in
//! [`Error::GraphCaptureInvalidated`](crate::Error::GraphCaptureInvalidated) (found by
//! the soak; `tests/test_graph_errors.rs` keeps it). **Repeated, they can crash the
//! process**: `cuCtxSynchronize` every 50 µs beside four threads capturing died of
//! SIGSEGV inside the driver in 7 of 7 runs on 2x H200 (driver 580.159.04), where the
//! same synchronisations beside scopes, and this crate's own frees that may wait for the
//! whole device beside captures, changed nothing, nor did cuBLAS through
//! `kernels::Cublas` on a fresh stream each time (`tests/test_device_wide_waits.rs`;
//! `benchmarks/results/2026-11-28-h200x2-device-sync-beside-captures.txt`). So do not
//! synchronise a context while captures may run on other threads; make cudarc's streams
//! before capturing, and keep one alive while captures may run.

mod cudarc_handles;
mod cudarc_slice;

pub use cudarc_slice::FromCudarcError;

use std::any::Any;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::context::Bound;
use crate::driver::pool::StreamOrdered;
use crate::error::Result;
use crate::graph::Enqueue;
use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceRepr};
use crate::scope::Scope;
use crate::sealed;

/// A device's context made current on this thread while this value lives; dropping it
/// gives the thread its previous context back. Not `Send`.
#[must_use = "the context is only bound while the binding lives"]
pub struct ContextBinding<'d> {
    _bound: Bound<'d>,
}

impl std::fmt::Debug for ContextBinding<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContextBinding")
    }
}

/// Makes `device`'s primary context current until the returned binding drops, for
/// library calls that act on the current context (creating a library handle, say).
pub fn bind(device: &Device) -> Result<ContextBinding<'_>> {
    Ok(ContextBinding {
        _bound: device.inner.bind()?,
    })
}

/// The scope's stream: a library call issued on it is ordered after the scope's work
/// so far, before its later work, and covered by its final synchronisation.
///
/// From this call on, scopes opening on this stream ask the driver whether it is being
/// captured into a graph (and refuse with [`Error::StreamCapturing`](crate::Error::StreamCapturing)
/// if so): code holding the handle could begin a capture. Streams whose handle never left
/// the crate skip that query.
#[inline]
pub fn raw_stream(scope: &Scope<'_, '_>) -> sys::CUstream {
    scope.stream.expose_handle()
}

/// The stream work issued through `target` goes on: a scope's stream (as
/// [`raw_stream`] gives it), or the stream a graph [`Capture`](crate::Capture) records,
/// for library calls that accept both (`kernels::Cublas::sgemm`). A call issued on a
/// capture's stream is recorded into the graph, not run: whatever memory it uses must
/// be memory the capture may use (its own allocations, what the graph holds), and it
/// must not wait on the host or on work outside the capture (the driver invalidates the
/// capture, which then returns an error).
#[inline(always)]
pub fn raw_stream_of<'s>(target: &impl Enqueue<'s>) -> sys::CUstream {
    target.raw_stream(sealed::TOKEN)
}

/// Lends `use_it` at least `bytes` of device memory that the stream of `target` keeps
/// for library workspaces (cuBLAS's, say), so that a library call does not allocate and
/// free a workspace of its own every time: `Ok(Some(_))` with `use_it`'s result on a
/// scope, `Ok(None)` on a graph [`Capture`](crate::Capture), whose graph must own the
/// memory its replays use (allocate the workspace in the capture instead).
///
/// The memory is valid for work enqueued from inside `use_it` on the scope's stream
/// ([`raw_stream_of`]), until that work has completed: the stream frees it,
/// stream-ordered on itself, only when it is dropped or when a later call asks for more.
/// It is lent under a lock for as long as `use_it` runs, so no other call on this stream,
/// from any thread, has it meanwhile, and work on one stream runs in order, so two uses
/// never overlap on the GPU. Its contents are unspecified. One block per stream, of the
/// largest size asked for; it counts as used memory of the device's pool until the
/// stream is dropped ([`Device::trim_memory`](crate::Device::trim_memory) does not
/// release it).
///
/// `use_it` should only enqueue work: the lock is held while it runs, so waiting inside
/// it for another thread that asks for the same stream's scratch would wait forever.
/// Asking again from inside `use_it`, on the same stream, returns
/// [`Error::Library`](crate::Error::Library) rather than waiting; so does an allocation
/// failure, as the pool's error (see [`Scope::alloc`](crate::Scope::alloc) for the
/// out-of-memory retry).
///
/// ```no_run
/// use stream_core::{interop, scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// scope(&stream, |s| {
///     let lent = interop::with_stream_scratch(s, 4 << 20, |workspace| {
///         // set a library's stream (interop::raw_stream_of(s)) and workspace here, then
///         // issue its call: it runs on the scope's stream.
///         println!("{workspace:#x}");
///     })?;
///     assert!(lent.is_some());
///     Ok::<_, Error>(())
/// })?;
/// # Ok(()) }
/// ```
pub fn with_stream_scratch<'s, R>(
    target: &impl Enqueue<'s>,
    bytes: usize,
    use_it: impl FnOnce(sys::CUdeviceptr) -> R,
) -> Result<Option<R>> {
    let Some(stream) = target.scratch_stream(sealed::TOKEN) else {
        return Ok(None);
    };
    let device = &stream.device.inner;
    // SAFETY: `alloc_async` allocates `n` bytes from the device's pool stream-ordered on
    // the stream it is given, this scratch's own; the memory is owned by nothing else.
    unsafe {
        stream.scratch.lend(
            &stream.raw,
            bytes,
            |n| {
                device
                    .alloc_async(&stream.raw, n)
                    .map(StreamOrdered::into_raw)
            },
            use_it,
        )
    }
    .map(Some)
}

/// The device address of memory a library call will only read.
#[inline(always)]
pub fn device_ptr<'s, T: DeviceRepr>(memory: &impl DeviceMemory<'s, T>) -> sys::CUdeviceptr {
    memory.raw(sealed::TOKEN).ptr
}

/// The device address of memory a library call may write (taking `&mut` is what proves
/// that no other argument of the call aliases it).
#[inline(always)]
pub fn device_ptr_mut<'s, T: DeviceRepr>(
    memory: &mut impl DeviceMemoryMut<'s, T>,
) -> sys::CUdeviceptr {
    memory.raw(sealed::TOKEN).ptr
}

/// Per-device state of another crate (a pool of library handles, say): the value of
/// type `T` for `device`, made by `init` the first time it is asked for and shared by
/// every handle of this [`Device`] (clones included) afterwards.
///
/// The device keeps it until its last handle is dropped, and drops it then, with the
/// device's context bound and before the context is released, so `T`'s `Drop` may
/// destroy library handles of that context (and may wait for the device: dropping the
/// device is a point the user chose). A clone of the `Arc` kept past that point is
/// dropped wherever it is dropped, without that guarantee.
///
/// ```no_run
/// use std::sync::Mutex;
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// #[derive(Default)]
/// struct Counter(Mutex<u64>);
/// let counter = stream_core::interop::device_extension(&dev, Counter::default);
/// *counter.0.lock().unwrap() += 1;
/// # Ok(()) }
/// ```
pub fn device_extension<T: Any + Send + Sync>(device: &Device, init: impl FnOnce() -> T) -> Arc<T> {
    device.inner.extension(init)
}
