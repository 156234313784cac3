//! [`scope`] and [`Scope`]: the one synchronisation the user cannot skip, and every
//! operation a scope issues on its stream.
//!
//! `scope(&stream, |s| ...)` runs the closure, then synchronises *that stream* in its
//! own stack frame, on normal return and on unwind. Everything that borrows host
//! memory for asynchronous work borrows it for the scope's `'env`, so the borrow
//! checker keeps that memory untouched until this synchronisation has happened.
//! Nothing the user holds is needed for safety: `mem::forget` of any value is at worst
//! a leak.
//!
//! Owns: `scope`, `Scope` and its operations (allocation, transfers and fills,
//! attaching `DeviceVec`s, kernel launches), `Pending`, forks (`Lend`, onto this device's
//! streams or another's), hand-offs, `scope_all!`, and recording into a trace.
//! Uses: `driver/` (raw copies and launches), `device/`, `memory/`, `host/` (staging),
//! `kernel/` (shapes, configurations, modules), `trace/`, `error`.

mod alloc;
mod attach;
mod exit;
mod fill;
mod fork;
mod hand_off;
mod launch;
mod lend;
mod outstanding;
pub(crate) mod owned;
mod pending;
mod scope_all;
mod tracing;
mod transfer;

pub(crate) use launch::launch_in_scope;
pub use launch::{arg, launch, KernelArgs, LaunchTarget};
pub use lend::Lend;
pub(crate) use outstanding::{Outstanding, StreamWatch, Watch};
pub use pending::Pending;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::device::peer::DeviceSet;
use crate::device::watch::Watches;
use crate::device::{Device, Event, Stream};
use crate::error::Error;
use crate::memory::brand::ScopeToken;
use crate::memory::LazyOpenScope;
use crate::trace::Trace;
use exit::ScopeExit;

/// The handle a scope's closure receives: everything asynchronous is issued through it,
/// on the scope's stream.
///
/// `'s` is the scope's brand, fresh and invariant for every scope, so nothing branded
/// (device buffers, views, [`Pending`] copies) can leave the scope or
/// enter another one. `'env` is the lifetime of the stream and of what the scope borrows
/// from outside: host memory handed to copies and attached
/// [`DeviceVec`](crate::DeviceVec)s stay borrowed for `'env`, until the outermost
/// scope's final synchronisation (a [fork](Scope::fork) shares its parent's `'env`).
/// A `Scope` is neither `Send` nor `Sync`: all work is issued from the thread that
/// opened it, on which its CUDA context is current.
///
/// Helper functions take `&'s Scope<'s, 'env>`, device memory branded `'s`, and host
/// memory borrowed for `'env` (a helper that touches no host memory can write
/// `&'s Scope<'s, '_>`):
///
/// ```no_run
/// use stream_core::{Scope, DeviceBuffer, Result};
/// fn upload_twice<'s, 'env>(s: &'s Scope<'s, 'env>, host: &'env [f32]) -> Result<(DeviceBuffer<'s, f32>, DeviceBuffer<'s, f32>)> {
///     Ok((s.upload(host)?, s.upload(host)?))
/// }
/// ```
pub struct Scope<'s, 'env: 's> {
    pub(crate) stream: &'env Stream,
    /// The proof that this scope's stream is synchronised before `'env` ends; it also
    /// carries the brand (invariant in `'s`) and is invariant in `'env`, like
    /// `std::thread::Scope`, so `'env` cannot be shrunk to the brand.
    pub(crate) token: ScopeToken<'s, 'env>,
    /// Where staged downloads register their copy-outs, for the outermost scope's end to
    /// wait for (forks share their parent's list).
    pub(crate) outstanding: &'s Outstanding,
    /// Lists the stream among this thread's open scopes from the scope's first
    /// allocation or collective until it ends, for the out-of-memory recovery of
    /// allocations and the thread's bounded waits.
    pub(crate) open: LazyOpenScope,
    /// `true` for a graph capture's scope ([`in_capture`](Self::in_capture)).
    in_capture: bool,
    /// The event of this scope's last fork, kept for its next one (see
    /// [`KeptForkEvent`]).
    fork_event: KeptForkEvent,
    /// The other devices whose memory may carry this scope's brand (lent to it by a
    /// fork, or handed to it), as [`DeviceSet`] bits: what a fork or hand-off onto a
    /// third device must make reachable there (see `device/peer.rs`). Only ever touched
    /// from the scope's thread; atomic only to keep `Scope`'s `Sync` error about its
    /// brand (see [`KeptForkEvent`]).
    reach: AtomicU64,
    /// The trace this scope's operations are recorded into, once it is given one
    /// ([`Scope::trace_into`]; a fork takes its parent's).
    trace: OnceLock<&'env Trace>,
}

/// The event of a scope's last fork, kept for its next one: a fork re-records its event
/// at once (a wait captures the state of the record before it), so a scope that forks
/// again and again takes the same event each time instead of going through the
/// thread's spares (about 30 ns less per fork on an H100 host, measured). It goes back
/// to the spares when the scope ends.
#[derive(Default)]
struct KeptForkEvent(Cell<Option<Event>>);

// SAFETY: a `KeptForkEvent` is only ever a field of a `Scope` (this type is private to
// `scope/` and made only in `Scope`'s constructors), and is only reached through that
// scope. `Scope` is neither `Send` nor `Sync` (its token's marker; `auto_traits.rs` pins
// both), so every access to the cell happens on the thread that made the scope, and two
// threads never touch it. `Sync` is implemented only so that the compiler's error for a
// scope shared with another thread names the scope's brand marker rather than this cell.
unsafe impl Sync for KeptForkEvent {}

impl KeptForkEvent {
    /// The kept event, if any; the slot is empty until it is given one back.
    fn take(&self) -> Option<Event> {
        self.0.take()
    }

    /// Keeps `event` for the scope's next fork (an event already kept, by a fork made
    /// inside this one's closure, goes back to the thread's spares).
    fn keep(&self, event: Event) {
        self.0.set(Some(event));
    }
}

/// Runs `f` with a fresh [`Scope`] on `stream`, then waits for the stream to finish.
///
/// * The closure returns `Result<T, E>` with `E: From<Error>`; a failed final
///   synchronisation becomes `E` (the closure's own error wins if it failed first).
/// * Only `stream` is synchronised, never the device.
/// * On unwind the stream is synchronised before the panic continues; if that fails the
///   process aborts, since it could not be proven that DMA into borrowed host memory
///   has stopped.
/// * The device's context is bound once here (and the previous one restored on exit).
/// * A stream being captured into a CUDA graph is refused with
///   [`Error::StreamCapturing`].
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let input: Vec<f32> = (0..1024).map(|i| i as f32).collect();
/// let mut out = vec![0f32; 1024];
/// scope(&stream, |s| {
///     let x = s.upload(&input)?;
///     let done = s.copy_to_host(&x, &mut out)?;
///     let host = done.wait()?; // the copy has landed; the host may read it now
///     assert_eq!(host[3], 3.0);
///     Ok::<_, Error>(())
/// })?;
/// # Ok(()) }
/// ```
///
/// Host memory a download writes stays locked until the scope ends (see
/// `ui-tests/tests/ui/host/read-while-download-pending.rs`):
///
/// ```compile_fail,E0502
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> stream_core::Result<()> {
/// let mut out = vec![0f32; 4];
/// scope(stream, |s| {
///     let x = s.alloc_zeroed::<f32>(4)?;
///     let _pending = s.copy_to_host(&x, &mut out)?;
///     println!("{}", out[0]); // error: `out` is borrowed by the pending download
///     Ok::<_, Error>(())
/// })
/// # }
/// ```
pub fn scope<'env, F, T, E>(stream: &'env Stream, f: F) -> std::result::Result<T, E>
where
    F: for<'s> FnOnce(&'s Scope<'s, 'env>) -> std::result::Result<T, E>,
    E: From<Error>,
{
    // The scope's context, bound for the scope's whole life (declared first, so it is
    // given back last, after the final synchronisation) unless this thread has it
    // current already (the driver is asked only when the hint says otherwise; see
    // `driver::context`: under a wrong hint, launches fail with an error and the
    // synchronisations bind for real).
    // Declared first, dropped last: the range covers the scope's end too.
    let _nvtx = crate::driver::nvtx::range(c"stream_core::scope");
    let context = &stream.device.inner.context;
    let _bound = match context.believed_current() {
        true => None,
        false => Some(context.bind().map_err(E::from)?),
    };
    // Staged downloads started in this scope or its forks, which `exit` waits for.
    let outstanding = Outstanding::default();
    let exit = ScopeExit::enter(stream, &outstanding).map_err(E::from)?;
    // SAFETY: `exit` synchronises `stream`, and waits for the copy-outs registered in
    // `outstanding`, when this function returns or unwinds, before `'env` ends; the scope
    // lives in this frame only (dropped before that).
    let scope = unsafe { Scope::branded(stream, &outstanding) };
    let out = f(&scope);
    // Every value branded by the scope was dropped at the end of the closure call above
    // (their stream-ordered frees are queued); now wait for all of it.
    let synced = exit.finish();
    match (out, synced) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(E::from(e)),
        (Ok(v), Ok(())) => Ok(v),
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    /// A scope on `stream` with a fresh brand: a [`scope`]'s, a fork's or a capture's,
    /// ended by a synchronisation, or an owned scope (`owned.rs`), ended by an event.
    ///
    /// # Safety
    ///
    /// The scope stays in the caller's frame, out of the user's reach, on this thread, and
    /// is dropped before `stream` can go; and either
    /// * (a scope ended by a synchronisation) the stream is synchronised, or joined by an
    ///   event into a stream that is, before `'env` ends (the outermost scope's final
    ///   synchronisation), also on unwind, and every job registered in `outstanding` is
    ///   waited for before `'env` ends too; or
    /// * (an owned scope) the scope is handed to a closure for which `'env` is a
    ///   higher-ranked lifetime (`for<'s, 'env> FnOnce(&'s Scope<'s, 'env>, &'env mut
    ///   O)`), so that the closure can borrow for `'env` only `'static` values and what
    ///   the caller lends it; everything the caller lends for `'env` stays alive, at the
    ///   same address, and is neither read, written, moved nor freed by the host until
    ///   all work enqueued on `stream` before the scope is dropped has completed, as
    ///   observed through an event recorded on `stream` after it (a query or a
    ///   synchronisation of that event that reports it complete, or a sticky error that
    ///   says the context stopped); if no such observation can be arranged, the caller
    ///   never releases it (it leaks), also when the closure panics; and every copy-out
    ///   registered in `outstanding` (a staged download writes its destination from
    ///   another thread, after the stream's work) is waited for before the caller
    ///   releases what it lent, also when the closure panics.
    #[inline]
    pub(crate) unsafe fn branded(stream: &'env Stream, outstanding: &'s Outstanding) -> Self {
        Scope {
            stream,
            outstanding,
            // SAFETY: this function's own contract, which is the token's (its first
            // alternative for a synchronised scope, its second for an owned one: then
            // everything borrowed for `'env` outlives every use of it).
            token: unsafe { ScopeToken::new(stream) },
            open: LazyOpenScope::default(),
            in_capture: false,
            fork_event: KeptForkEvent::default(),
            reach: AtomicU64::new(0),
            trace: OnceLock::new(),
        }
    }

    /// The devices whose memory may carry this scope's brand: its own, and those of
    /// memory lent or handed to it from other devices.
    #[inline]
    pub(crate) fn reach(&self) -> DeviceSet {
        DeviceSet::from_bits(self.reach.load(Ordering::Relaxed))
            .union(DeviceSet::of(self.device().ordinal()))
    }

    /// Takes `parent`'s reach, for a fork on the same device.
    #[inline(always)]
    pub(crate) fn copy_reach(&self, parent: &Scope<'_, '_>) {
        let bits = parent.reach.load(Ordering::Relaxed);
        if bits != 0 {
            self.reach.store(bits, Ordering::Relaxed);
        }
    }

    /// Notes that memory of the devices in `devices` may now carry this scope's brand.
    #[inline]
    pub(crate) fn widen_reach(&self, devices: DeviceSet) {
        let now = self.reach.load(Ordering::Relaxed);
        if now | devices.bits() != now {
            self.reach.store(now | devices.bits(), Ordering::Relaxed);
        }
    }

    /// Marks this scope as a graph capture's: nothing it records runs before a replay,
    /// so it is never listed among the thread's open scopes and registers no watch. The
    /// thread's waits have nothing of it to wait for (its frees and collectives run at
    /// the replays, in the replaying scope), and a query or synchronisation of its
    /// capturing stream would be refused, and would end the capture.
    pub(crate) fn in_capture(mut self) -> Self {
        self.in_capture = true;
        self
    }

    /// Lists this scope's stream among the thread's open scopes (once), before the scope
    /// gets memory that it frees on its stream: what an out-of-memory retry waits for.
    /// Not a capture's (see [`in_capture`](Self::in_capture)).
    #[inline]
    pub(crate) fn note_frees(&self) {
        self.note_open(None);
    }

    /// [`note_frees`](Self::note_frees), and given the scope's `watches`, lists its
    /// stream among the process's watched streams too, which other threads' calls that
    /// wait for the whole device wait for first (`memory/watched_streams.rs`).
    #[inline]
    fn note_open(&self, watches: Option<&Arc<Watches>>) {
        if self.in_capture {
            return;
        }
        // SAFETY: the scope borrows its stream (one of its device's: a `Stream` is made
        // by its `Device`) for `'env`, longer than it lives, stays in its creator's frame
        // on this thread (`branded`'s contract), and always passes its own stream, so the
        // entries are dropped, on this thread, with the scope, before the stream can go.
        unsafe {
            self.open
                .note_frees(&self.stream.device.inner, &self.stream.raw, watches)
        };
    }

    /// Notes a collective issued on this scope's stream through the communicator that
    /// `watch` watches: from now on the scope's waits are bounded by it, and the stream
    /// is listed among the thread's open scopes (once), so that the thread's waits that
    /// are no scope's own (an out-of-memory retry, a call that waits for the whole
    /// device: `device/watch.rs`) poll it within the same bounds.
    #[inline]
    pub(crate) fn watch_collective(&self, watch: &Watch) {
        if self.in_capture {
            // Recorded, not run: the replaying scope registers the watch
            // (`Scope::replay_with`).
            return;
        }
        self.outstanding.watch(watch);
        if !self.open.is_watched() {
            self.note_first_collective();
        }
    }

    /// The first collective on this scope's stream: lists it among this thread's open
    /// scopes and the process's watched streams. Out of line, so that the later
    /// collectives' path is the one load above (a one-rank all_reduce's enqueue measured
    /// 1.09-1.14x raw without the second list, 1.14-1.24x with it inline, on one H200).
    #[cold]
    #[inline(never)]
    fn note_first_collective(&self) {
        self.note_open(self.outstanding.watches());
    }

    /// The stream this scope issues work on.
    pub fn stream(&self) -> &'env Stream {
        self.stream
    }

    /// The device of the scope's stream.
    pub fn device(&self) -> &'env Device {
        &self.stream.device
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("stream", self.stream)
            .finish()
    }
}
