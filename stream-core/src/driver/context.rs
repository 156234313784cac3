//! CUDA contexts: the retained primary context of a device, and binding a context to
//! the calling thread for as long as a guard lives.
//!
//! Every call of this crate that needs a particular context current makes it current
//! through [`PrimaryContext::bind`] (or [`bind_raw`]) and gets a [`Bound`] guard, which
//! gives the thread back the context it had before when it is dropped. So no call of
//! this crate leaves another context current than the one the caller had, and code
//! that runs inside a scope on one device keeps that device's context however many
//! other devices' handles it touches.
//!
//! What "gives back" means:
//! * the context was already current: nothing is changed, nothing is restored (the
//!   common case inside a scope, and the only cost is `cuCtxGetCurrent`);
//! * another context was current: ours is pushed on the thread's context stack
//!   (`cuCtxPushCurrent`) and popped when the guard drops (`cuCtxPopCurrent`), which
//!   "makes that context current to the CPU thread again" (CUDA driver API, on
//!   `cuCtxPopCurrent`). The driver keeps the displaced context on its stack, so even a
//!   context destroyed meanwhile is handed back as the driver's own state;
//! * no context was current: ours is made current and left there. Nothing was displaced,
//!   and leaving it saves the next scope on this thread two driver calls. (A thread left
//!   with a context that is later destroyed gets `CUDA_ERROR_CONTEXT_IS_DESTROYED` from
//!   calls that rely on the current context, as the driver documents for `cuCtxDestroy`;
//!   this crate binds its own before every such call.)
//!
//! # The hint, and why hot paths may skip the driver
//!
//! Asking the driver which context is current (`cuCtxGetCurrent`) costs tens of
//! nanoseconds, and a scope's entry and exit would ask twice. So this module keeps, per
//! thread, the context it last made (or saw) current: [`PrimaryContext::believed_current`].
//! The hint is wrong only if code outside this crate changed the thread's context since.
//! Hot paths that would merely fail with an error under a wrong context use it to skip
//! binding: a scope's entry (a launch issued to a stream of another context is refused
//! by the driver), and the synchronisations at a scope's end, a fork's join and
//! `Pending::wait`, which first synchronise directly and, if that fails with an error
//! that is not sticky, bind the context for real and synchronise again (so a wrong hint
//! costs a retry, never a released borrow). Creating driver objects (events, streams,
//! modules, pinned memory), which lands in the current context, always binds for real.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use cudarc::driver::{result, sys};

use super::device::DeviceId;
use crate::error::{DriverResultExt, Result};

/// A device's primary context, retained for as long as this value lives. One per device
/// at a time in the process ([`PrimaryContext::of`]), shared by every `Device` handle of
/// that GPU, so that "this context is still alive" is a question a `Weak` answers.
pub(crate) struct PrimaryContext {
    device: DeviceId,
    raw: sys::CUcontext,
    /// The devices (bit `ordinal`) to which this device's default pool has granted access
    /// while this context lived (see `device/peer.rs`). Kept here, with the context, so
    /// that a record never outlives the memory it is about.
    pool_grants: AtomicU64,
}

thread_local! {
    /// The context this crate last made or saw current on this thread (see the module
    /// docs). Only compared, never used as a handle.
    static LAST_BOUND: Cell<usize> = const { Cell::new(0) };
}

/// Notes `ctx` as the thread's current context.
#[inline(always)]
fn note_current(ctx: sys::CUcontext) {
    let _ = LAST_BOUND.try_with(|last| last.set(ctx as usize));
}

/// The primary contexts this process holds, by device; an entry whose last `Arc` is gone
/// has been released.
static RETAINED: Mutex<Vec<(DeviceId, Weak<PrimaryContext>)>> = Mutex::new(Vec::new());

// SAFETY: a `CUcontext` is an opaque handle that the driver accepts from any thread
// (binding it to a thread is what `bind` does); this value only reads it, and releases
// the retain once, in `Drop`.
unsafe impl Send for PrimaryContext {}
// SAFETY: see `Send`: shared access only copies the handle.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// The primary context of `device`: the one this process holds already, or a newly
    /// retained one.
    pub(crate) fn of(device: DeviceId) -> Result<Arc<Self>> {
        let mut retained = RETAINED.lock().unwrap_or_else(PoisonError::into_inner);
        retained.retain(|(_, context)| context.strong_count() > 0);
        if let Some(context) = retained
            .iter()
            .find(|(d, _)| *d == device)
            .and_then(|(_, context)| context.upgrade())
        {
            return Ok(context);
        }
        // SAFETY: `device` came from `cuDeviceGet` (`DeviceId` is made no other way);
        // retaining has no other precondition.
        let raw = unsafe { result::primary_ctx::retain(device.raw()) }
            .call("cuDevicePrimaryCtxRetain")?;
        let context = Arc::new(PrimaryContext {
            device,
            raw,
            pool_grants: AtomicU64::new(0),
        });
        retained.push((device, Arc::downgrade(&context)));
        Ok(context)
    }

    /// `true` when this crate last made or saw this context current on this thread, and
    /// so it is current unless code outside this crate changed it (see the module docs).
    /// No driver call.
    #[inline(always)]
    pub(crate) fn believed_current(&self) -> bool {
        LAST_BOUND
            .try_with(|last| last.get() == self.raw as usize)
            .unwrap_or(false)
    }

    /// Runs `call` (a driver call that only fails, never misbehaves, under a wrong
    /// context) with this context current: directly when this thread is believed to have
    /// it current, and if that fails with an error that is not sticky (or the context is
    /// not believed current), once more with the context bound for real. A wrong hint
    /// costs a retry, never a wrong answer (see the module docs on the hint).
    #[inline]
    pub(crate) fn run_as_current<T>(&self, call: impl Fn() -> Result<T>) -> Result<T> {
        if self.believed_current() {
            match call() {
                Err(e) if !e.is_sticky() => {} // perhaps the wrong context: bind and retry
                done => return done,
            }
        }
        let _bound = self.bind()?;
        call()
    }

    /// The devices (bit `ordinal`) this device's pool has granted access to (see
    /// `device/peer.rs`).
    #[inline]
    pub(crate) fn pool_grants(&self) -> u64 {
        self.pool_grants.load(Ordering::Acquire)
    }

    /// Notes that this device's pool granted access to the devices in `bits`.
    pub(crate) fn note_pool_grants(&self, bits: u64) {
        self.pool_grants.fetch_or(bits, Ordering::Release);
    }

    /// The device this is the primary context of.
    pub(crate) fn device(&self) -> DeviceId {
        self.device
    }

    /// Makes this context current on the calling thread until the guard drops.
    #[inline]
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        // SAFETY: `self` retains the context, and the guard borrows `self`, so the
        // context is alive for the guard's whole life.
        unsafe { bind_raw(self.raw) }
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: `of` retained the context of this device once for this value, and this
        // is the one matching release. Failure only leaks the retain; it cannot be
        // reported from `drop`.
        let _ = unsafe { result::primary_ctx::release(self.device.raw()) };
    }
}

/// A context made current on this thread by [`bind_raw`] or [`PrimaryContext::bind`];
/// dropping it gives the thread its previous context back (see the module docs). Not
/// `Send`: a context stack belongs to one thread.
#[must_use = "the context is only bound while the guard lives"]
pub(crate) struct Bound<'c> {
    restore: Restore,
    /// The context that was current before (for the hint after a pop).
    previous: sys::CUcontext,
    _context: PhantomData<&'c PrimaryContext>,
    _thread_bound: PhantomData<*const ()>,
}

/// What a [`Bound`] guard does when it drops.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Restore {
    /// The context was current already: nothing.
    Nothing,
    /// It displaced another context: pop it off the thread's stack.
    Pop,
    /// No context was current: leave it (see the module docs), unless
    /// [`Bound::unbind_if_set`] asks otherwise.
    LeftBound,
}

impl Bound<'_> {
    /// Drops the guard, and if no context was current before it, makes none current
    /// again: for the one caller that is about to release the context it bound, so
    /// that no thread is left with a context this crate destroyed.
    pub(crate) fn unbind_if_set(self) {
        if self.restore == Restore::LeftBound {
            // SAFETY: a null context is always accepted: it unbinds the current one.
            let _ = unsafe { result::ctx::set_current(std::ptr::null_mut()) };
            note_current(std::ptr::null_mut());
        }
    }
}

/// Makes `ctx` current on the calling thread until the returned guard drops.
///
/// # Safety
///
/// `ctx` must be a live context for as long as the returned guard lives (the caller
/// picks `'c` accordingly): for example the context of a scope's stream, used within
/// that scope, which keeps its device, hence the retained context, alive.
#[inline]
pub(crate) unsafe fn bind_raw<'c>(ctx: sys::CUcontext) -> Result<Bound<'c>> {
    let current = result::ctx::get_current().call("cuCtxGetCurrent")?;
    let previous = current.unwrap_or(std::ptr::null_mut());
    let restore = match current {
        Some(now) if now == ctx => Restore::Nothing,
        None => {
            // SAFETY: `ctx` is live (the caller's duty); with no context current,
            // binding it displaces nothing.
            unsafe { result::ctx::set_current(ctx) }.call("cuCtxSetCurrent")?;
            Restore::LeftBound
        }
        Some(_) => {
            // SAFETY: `ctx` is live (the caller's duty). Pushing keeps the displaced
            // context on the driver's stack, from which the guard's drop pops ours.
            unsafe { sys::cuCtxPushCurrent_v2(ctx) }
                .result()
                .call("cuCtxPushCurrent")?;
            Restore::Pop
        }
    };
    note_current(ctx);
    Ok(Bound {
        restore,
        previous,
        _context: PhantomData,
        _thread_bound: PhantomData,
    })
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        if self.restore == Restore::Pop {
            let mut popped: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: this guard pushed a context on this thread's stack (the guard is not
            // `Send`), so the stack is not empty; the driver writes the popped handle to
            // `popped`, a live local. A failure leaves our context current, which every
            // later call of this crate corrects by binding its own.
            let _ = unsafe { sys::cuCtxPopCurrent_v2(&raw mut popped) };
            note_current(self.previous);
        }
    }
}

impl Bound<'_> {
    /// `(free, total)` device memory of the device whose context this binds.
    pub(crate) fn memory_info(&self) -> Result<(usize, usize)> {
        result::mem_get_info().call("cuMemGetInfo")
    }
}
