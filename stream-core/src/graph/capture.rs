//! [`Device::capture`], [`Scope::capture`] and [`Capture`]: recording a sequence of
//! stream work into a graph, once, on a stream that belongs to the capture.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::device::{Device, Stream};
use crate::driver::graph::{end_capture, RawGraph};
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::graph::hold::{Hold, HoldPermit};
use crate::graph::{CaptureState, Graph};
use crate::memory::brand::HoldToken;
use crate::memory::{
    DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceRepr, DeviceSlice, DeviceSliceMut, DeviceVec,
};
use crate::scope::Scope;
use crate::sealed::unavailable;

/// The handle a capture's closure receives: work issued through it is recorded into the
/// graph, not run. It offers what a [`Scope`] offers that a graph can replay, and
/// nothing that waits on the host.
///
/// | in a capture | how |
/// |--------------|-----|
/// | device memory of the graph's own | [`alloc`](Self::alloc), [`alloc_zeroed`](Self::alloc_zeroed): allocated and freed inside the graph at every replay; branded `'g`, so it cannot leave the capture |
/// | copies from and to pinned host memory the graph holds | [`upload`](Self::upload), [`copy_to_device`](Self::copy_to_device), [`copy_to_host`](Self::copy_to_host) |
/// | device copies and fills | [`copy_device`](Self::copy_device), [`zero`](Self::zero), [`fill`](Self::fill) |
/// | `#[kernel]` launches, the `kernels` crate, cuBLAS | pass the capture where a scope goes (they take [`Enqueue`](crate::Enqueue)) |
/// | concurrent branches | [`fork`](Self::fork), [`fork_with_priority`](Self::fork_with_priority) (a branch of a chosen stream priority, kept at every replay) |
/// | a handle to change a kernel's scalar later | [`last_kernel`](Self::last_kernel) |
///
/// Not offered, and a compile error with a message that says why: waiting for a copy
/// ([`Recorded::wait`](crate::Recorded::wait)), copies of pageable memory (the
/// [`PinnedMemory`](crate::PinnedMemory) bound), creating or reading a `DeviceVec`
/// ([`device`](Self::device)), attaching one ([`attach`](Self::attach)).
///
/// `'g` is the capture's brand, fresh and invariant like a scope's. A `Capture` is
/// neither `Send` nor `Sync`.
///
/// Work issued on *other* scopes from inside the closure (the scope that called
/// `capture`, say) is not recorded: it runs as usual, on its own stream.
pub struct Capture<'g> {
    /// A scope on the capture's own stream, which is capturing from before this scope
    /// exists until after it is dropped: nothing issued through it runs, everything is
    /// recorded. Private, so that only the methods of `Capture`, none of which waits on
    /// the host, reach it.
    scope: Scope<'g, 'g>,
    /// What the capture remembers for its graph (shared with its forks).
    state: &'g CaptureState,
    /// `state`'s index of the last kernel launched through this capture (not its forks),
    /// or [`NO_KERNEL`]. Every field but the scope's brand is `Send` and `Sync`, so that
    /// the compiler's error for a capture used from another thread names the brand's
    /// marker, as for a scope.
    last_kernel: AtomicUsize,
}

/// `Capture::last_kernel`'s value when there is none.
const NO_KERNEL: usize = usize::MAX;

impl Device {
    /// Records the work `f` issues through its [`Capture`] into a graph, once, and
    /// returns the graph, ready to [replay](Scope::replay) on any scope of this device,
    /// with `f`'s own output. Nothing runs: every operation becomes a node of the graph.
    ///
    /// `held` is what the graph holds for as long as it exists (see [`Hold`]): the pinned
    /// buffers its copies read and write, moved in or borrowed, and the
    /// [`DeviceVec`]s its kernels use, borrowed (`&v` read-only, `&mut v` written). The
    /// closure receives views of them, branded by the capture. Between replays the host
    /// refills inputs and reads outputs through [`Graph::held_mut`] and [`Graph::held`].
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let offsets = dev.upload_vec(&vec![0.5f32; 4096])?;
    /// let (input, output) = (dev.alloc_pinned::<f32>(4096)?, dev.alloc_pinned::<f32>(4096)?);
    /// let (mut graph, ()) = dev.capture((input, output, &offsets), |g, (x_host, mut y_host, w)| {
    ///     let x = g.upload(&x_host)?;                    // a copy node from pinned memory
    ///     let mut y = g.alloc::<f32>(x.len())?;          // the graph's own memory
    ///     g.copy_device(&w, &mut y)?;                    // `kernels::axpy(g, ...)` works too
    ///     g.copy_to_host(&y, &mut y_host)?;              // a copy node into pinned memory
    ///     Ok::<_, Error>(())
    /// })?;
    /// scope(&stream, |s| {
    ///     let mut graph = &mut graph;
    ///     for step in 0..100 {
    ///         graph.held_mut().0.fill(step as f32);      // refill the input
    ///         graph = s.replay(graph)?.wait()?;         // replay, wait for it
    ///         assert_eq!(graph.held().1[0], 0.5);       // read the output
    ///     }
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// The graph must outlive the scopes that replay it (a replay borrows it until the
    /// scope's end, like a download's destination), so it is made before them, here on
    /// the device, or returned from the scope that captured it with
    /// [`Scope::capture`].
    ///
    /// The capture runs on a stream of its own, in `CU_STREAM_CAPTURE_MODE_RELAXED` (see
    /// [`Graph`]): no user [`Stream`] is ever capturing, other threads are not affected,
    /// and work the closure issues on scopes is not recorded (it runs as usual). This
    /// device's context is current on the thread during the capture.
    ///
    /// * The closure returns `Result<T, E>` with `E: From<Error>`; its error is returned
    ///   as it is, and no graph is made.
    /// * [`Error::GraphCaptureInvalidated`] when the driver invalidated the capture (work
    ///   it cannot record reached the capture's stream through raw handles, e.g. a wait
    ///   on an event recorded outside the capture).
    /// * [`Error::DeviceMismatch`] when a held `DeviceVec` is on another device.
    /// * A failure to instantiate the recorded graph is the driver's error
    ///   (`cuGraphInstantiateWithFlags`).
    ///
    /// A graph's memory may not be dropped, moved or written while the graph exists (see
    /// `ui-tests/tests/ui/graph/replay-after-held-device-vec-dropped.rs`):
    ///
    /// ```compile_fail,E0505
    /// # use stream_core::{scope, Device, Error, Stream};
    /// # fn f(stream: &Stream, dev: &Device) -> Result<(), Error> {
    /// let weights = dev.upload_vec(&[1.0f32; 16])?;
    /// let (mut graph, ()) = dev.capture(&weights, |g, w| {
    ///     let mut y = g.alloc::<f32>(16)?;
    ///     g.copy_device(&w, &mut y)?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// drop(weights); // error: the graph holds `weights`
    /// scope(stream, |s| s.replay(&mut graph).map(drop))
    /// # }
    /// ```
    pub fn capture<H, F, T, E>(&self, held: H, f: F) -> std::result::Result<(Graph<H>, T), E>
    where
        H: Hold,
        F: for<'g> FnOnce(&'g Capture<'g>, H::Views<'g>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::capture");
        let mut held = held;
        let state = CaptureState::new(CaptureState::fresh_id());
        let (mut template, out) = record(self, &mut held, &state, f)?;
        let id = state.id();
        let recorded = state.into_parts();
        let exec = template
            .instantiate(recorded.node_priorities)
            .map_err(E::from)?;
        let graph = Graph::instantiated(exec, template, recorded, held, id, self);
        Ok((graph, out))
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    /// [`Device::capture`] on this scope's device: records `f`'s work into a graph.
    /// Nothing of the capture runs, and it is not ordered with this scope's work.
    ///
    /// A replay borrows its graph until the replaying scope's end, so this scope cannot
    /// replay a graph it captured into a local: return the graph from the scope (a
    /// `Graph` carries no brand) and replay it in a later one, or capture it before the
    /// scope with [`Device::capture`].
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(stream: &Stream) -> Result<(), Error> {
    /// let out = stream.device().alloc_pinned::<u32>(256)?;
    /// let (mut graph, ()) = scope(stream, |s| {
    ///     s.capture(out, |g, mut out| {
    ///         let mut x = g.alloc::<u32>(256)?;
    ///         g.fill(&mut x, 7)?;
    ///         g.copy_to_host(&x, &mut out)?;
    ///         Ok::<_, Error>(())
    ///     })
    /// })?;
    /// scope(stream, |s| s.replay(&mut graph).map(drop))?;
    /// assert_eq!(graph.held()[0], 7); // the scope's end completed the replay
    /// # Ok(()) }
    /// ```
    pub fn capture<H, F, T, E>(&self, held: H, f: F) -> std::result::Result<(Graph<H>, T), E>
    where
        H: Hold,
        F: for<'g> FnOnce(&'g Capture<'g>, H::Views<'g>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::capture");
        self.device().capture(held, f)
    }
}

/// Runs `f` on a new capture of `device` with views of `held`, and returns the graph it
/// recorded with `f`'s output: the one capture routine of [`Device::capture`] and
/// [`Graph::update`]. The caller makes the graph (or the instance it updates) hold
/// `held` for as long as it can be replayed; on any error the graph is discarded.
pub(super) fn record<H, F, T, E>(
    device: &Device,
    held: &mut H,
    state: &CaptureState,
    f: F,
) -> std::result::Result<(RawGraph, T), E>
where
    H: Hold,
    F: for<'g> FnOnce(&'g Capture<'g>, H::Views<'g>) -> std::result::Result<T, E>,
    E: From<Error>,
{
    // The device's context, current for the whole capture: launches and copies are
    // issued in it.
    let _bound = device.inner.bind().map_err(E::from)?;
    // Until `end_capture` (in `ending`, on return or unwind) only this capture issues
    // work on it, through the `Capture` below, which never leaves this call.
    let stream = Stream::capturing(device).map_err(E::from)?;
    let ending = EndCapture(&stream.raw);
    let out = run(&stream, held, state, f);
    let graph = ending.finish();
    if let (Ok(_), Some(failure)) = (&out, state.group_failure().get()) {
        return Err(E::from(group_failed(failure)));
    }
    match (out, graph) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(E::from(invalidated(e))),
        (Ok(_), Ok(None)) => Err(E::from(Error::from(
            crate::error::GraphCaptureInvalidated {
                cause: "the driver ended the capture without a graph".to_owned(),
            },
        ))),
        (Ok(v), Ok(Some(graph))) => Ok((graph, v)),
    }
}

/// `f` on a capture on `stream`, with views of `held`.
fn run<H, F, T, E>(
    stream: &Stream,
    held: &mut H,
    state: &CaptureState,
    f: F,
) -> std::result::Result<T, E>
where
    H: Hold,
    F: for<'g> FnOnce(&'g Capture<'g>, H::Views<'g>) -> std::result::Result<T, E>,
    E: From<Error>,
{
    // SAFETY: `stream` is capturing (`record` began the capture) until after this
    // function returns or unwinds (`record`'s `EndCapture`), only this capture issues
    // work on it, nothing is issued on it after the capture ends, and the capture lives
    // in this frame.
    let capture = unsafe { Capture::open(stream, state) }.map_err(E::from)?;
    // SAFETY: work branded by this token's brand (the capture's, once `f` is called with
    // both) is recorded into the graph that `record` returns, never run: the stream
    // captures (checked by `Capture::open`). `record`'s callers make that graph (or the
    // instance it updates) hold `held` for as long as it can be replayed, and every
    // replay borrows the graph exclusively until it is known complete (`Scope::replay`
    // takes `&mut Graph` until its `Pending` is waited for or its scope has ended). The
    // token stays in this frame.
    let token = unsafe { HoldToken::new(&stream.device) };
    let views = held.views(&HoldPermit(token)).map_err(E::from)?;
    f(&capture, views)
}

/// A capture whose collectives went into an `nccl::group` whose end failed with
/// `failure`: NCCL may have left some of them out of the graph.
#[cold]
fn group_failed(failure: &Error) -> Error {
    Error::from(crate::error::GraphCaptureInvalidated {
        cause: format!(
            "the end of an nccl::group whose collectives the capture recorded failed \
             ({failure}), so NCCL may have left some of them out of the graph"
        ),
    })
}

/// The error that ending a capture returned, as [`Error::GraphCaptureInvalidated`] when
/// it is one of the driver's capture errors.
fn invalidated(error: Error) -> Error {
    // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) to CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
    // (908): the driver's stream-capture errors.
    match error.driver_code() {
        Some(900..=908) => Error::from(crate::error::GraphCaptureInvalidated {
            cause: error.to_string(),
        }),
        _ => error,
    }
}

/// Ends the capture on its stream: [`finish`](Self::finish) on return, `Drop` (which
/// discards the graph) while unwinding.
struct EndCapture<'a>(&'a RawStream);

impl EndCapture<'_> {
    fn finish(self) -> Result<Option<RawGraph>> {
        let ended = end_capture(self.0);
        std::mem::forget(self);
        ended
    }
}

impl Drop for EndCapture<'_> {
    /// Runs only while unwinding out of the capture's closure: ends the capture (taking
    /// its stream and every fork's out of capture mode) and destroys what it recorded.
    fn drop(&mut self) {
        let _ = end_capture(self.0);
    }
}

impl<'g> Capture<'g> {
    /// A capture on `stream`, remembering into `state`.
    ///
    /// # Safety
    ///
    /// `stream` is capturing from before this call until after the capture is dropped;
    /// nothing but this capture issues work on it, and nothing is issued on it after the
    /// capture ends (so no work ever runs on it); the capture stays in the caller's
    /// frame, on this thread.
    pub(super) unsafe fn open(stream: &'g Stream, state: &'g CaptureState) -> Result<Self> {
        if !stream.raw.is_capturing()? {
            return Err(Error::from(crate::error::GraphCaptureInvalidated {
                cause: "a stream of the capture did not join it".to_owned(),
            }));
        }
        Ok(Capture {
            // SAFETY: `Scope::branded` asks that the stream be synchronised before `'env`
            // ends, also on unwind: no work ever runs on `stream` (this function's
            // contract), so it never has any to wait for. The scope stays inside this
            // capture, in the caller's frame, on this thread. No host memory is borrowed
            // through it: `Capture` offers none of the scope's host copies, so no staged
            // download is ever listed in `no_downloads`.
            scope: unsafe { Scope::branded(stream, &state.no_downloads) }.in_capture(),
            state,
            last_kernel: AtomicUsize::new(NO_KERNEL),
        })
    }

    /// The device of the graph.
    pub(crate) fn graph_device(&self) -> &'g Device {
        self.scope.device()
    }

    /// The capturing stream.
    pub(crate) fn capture_stream(&self) -> &'g RawStream {
        &self.scope.stream.raw
    }

    /// What the capture remembers for its graph.
    pub(crate) fn state(&self) -> &'g CaptureState {
        self.state
    }

    /// Sets the last kernel launched through this capture (`None`: the last launch
    /// recorded nothing).
    pub(super) fn set_last_kernel(&self, index: Option<usize>) {
        self.last_kernel
            .store(index.unwrap_or(NO_KERNEL), Ordering::Relaxed);
    }

    /// The last kernel launched through this capture.
    pub(super) fn last_kernel_index(&self) -> Option<usize> {
        Some(self.last_kernel.load(Ordering::Relaxed)).filter(|&i| i != NO_KERNEL)
    }

    /// The capture's scope, for the graph's own operations (and the collectives of
    /// `nccl/captured.rs`).
    pub(crate) fn scope(&self) -> &Scope<'g, 'g> {
        &self.scope
    }

    /// Allocates `len` elements of the graph's own memory: an allocation node, and a
    /// free node where the buffer is dropped (inside the capture: the buffer is branded
    /// `'g`, so it cannot leave it). Every replay allocates and frees it again, from the
    /// driver's graph memory; its contents do not persist between replays.
    ///
    /// Forgetting the buffer (`mem::forget`) leaves the allocation unfreed at the end of
    /// a replay: the next replay frees it first (the graph is instantiated with
    /// `AUTO_FREE_ON_LAUNCH`), so it is a leak until then, not an error.
    pub fn alloc<T: DeviceRepr>(&'g self, len: usize) -> Result<DeviceBuffer<'g, T>> {
        let buffer = self.scope.alloc(len)?;
        if !buffer.is_empty() {
            self.state.allocations.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buffer)
    }

    /// Allocates `len` zeroed elements of the graph's own memory (an allocation and a
    /// memset node).
    pub fn alloc_zeroed<T: DeviceRepr>(&'g self, len: usize) -> Result<DeviceBuffer<'g, T>> {
        let mut buffer = self.alloc(len)?;
        self.zero(&mut buffer)?;
        Ok(buffer)
    }

    /// Records setting every byte of `dst` to zero.
    pub fn zero<T: DeviceRepr>(&'g self, dst: &mut impl DeviceMemoryMut<'g, T>) -> Result<()> {
        self.scope.zero(dst)
    }

    /// Records setting every element of `dst` to `value` (see [`Scope::fill`]).
    pub fn fill<T: DeviceRepr>(
        &'g self,
        dst: &mut impl DeviceMemoryMut<'g, T>,
        value: T,
    ) -> Result<()> {
        self.scope.fill(dst, value)
    }

    /// Records a copy of device memory to device memory of the same length.
    pub fn copy_device<T: DeviceRepr>(
        &'g self,
        src: &impl DeviceMemory<'g, T>,
        dst: &mut impl DeviceMemoryMut<'g, T>,
    ) -> Result<()> {
        self.scope.copy_device(src, dst)
    }

    /// Not available in a capture (a compile error): a [`Device`] would let the capture
    /// create or read [`DeviceVec`]s, which blocks the host, while nothing of the capture
    /// runs. Create `DeviceVec`s before the capture and lend them to
    /// [`Device::capture`]; read them after a replay (see
    /// `ui-tests/tests/ui/graph/device-vec-created-in-a-capture.rs`).
    pub fn device(&self) -> &Device
    where
        Self: unavailable::DeviceOutsideCapture,
    {
        self.scope.device()
    }

    /// Not available in a capture (a compile error): the graph uses a `DeviceVec` at
    /// every replay, after the capture, so it must hold it for as long as it exists.
    /// Lend it to [`Device::capture`] instead (`&mut v`).
    /// (`ui-tests/tests/ui/graph/device-vec-attached-in-a-capture.rs`)
    pub fn attach<T: DeviceRepr>(
        &'g self,
        vec: &'g mut DeviceVec<T>,
    ) -> Result<DeviceSliceMut<'g, 'g, T>>
    where
        Self: unavailable::LendToCapture,
    {
        // No type satisfies the bound: this cannot be called.
        let _ = vec;
        unreachable!("`Capture::attach` cannot be called (its bound is never met)")
    }

    /// Not available in a capture (a compile error): lend the `DeviceVec` to
    /// [`Device::capture`] instead (`&v`). See [`attach`](Self::attach).
    pub fn attach_ref<T: DeviceRepr>(
        &'g self,
        vec: &'g DeviceVec<T>,
    ) -> Result<DeviceSlice<'g, 'g, T>>
    where
        Self: unavailable::LendToCapture,
    {
        // No type satisfies the bound: this cannot be called.
        let _ = vec;
        unreachable!("`Capture::attach_ref` cannot be called (its bound is never met)")
    }
}

impl std::fmt::Debug for Capture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("graph", &self.state.id())
            .finish()
    }
}
