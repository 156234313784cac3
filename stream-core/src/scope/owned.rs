//! [`Scope::owned`]: a scope whose end is not a synchronisation, for
//! [`Stream::run_owned`](crate::Stream::run_owned) (see [`crate::future`], which holds the
//! argument in full).
//!
//! A [`scope`](crate::scope) keeps the host memory its work uses borrowed for `'env` and
//! synchronises its stream before `'env` ends. An owned scope turns this around: `'env`
//! is a higher-ranked lifetime of the user's closure, so the only host memory (and
//! `DeviceVec`s) the closure can hand to work for `'env` is `'static` or lent by the
//! caller from values the caller owns; the caller keeps those values, unmoved and
//! untouched, until an event recorded after the scope's work is seen complete. `'env`
//! then ends when the closure returns, long before the GPU is done, and no thread blocks.

use super::outstanding::Outstanding;
use crate::device::Stream;
use crate::error::Result;
use crate::memory::brand::ScopeToken;
use crate::memory::LazyOpenScope;
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// A scope on `stream` with a fresh brand, whose end is marked by the caller (an
    /// event recorded after its work), not by a synchronisation.
    ///
    /// # Safety
    ///
    /// * The scope is handed to a closure for which `'env` is a higher-ranked lifetime
    ///   (`for<'s, 'env> FnOnce(&'s Scope<'s, 'env>, &'env mut O)`), so that the closure
    ///   can borrow for `'env` only `'static` values and what the caller lends it.
    /// * Everything the caller lends for `'env` stays alive, at the same address, and is
    ///   neither read, written, moved nor freed by the host until all work enqueued on
    ///   `stream` before the scope is dropped has completed, as observed through an event
    ///   recorded on `stream` after it (a query or a synchronisation of that event that
    ///   reports it complete, or a sticky error that says the context stopped); if no
    ///   such observation can be arranged, the caller never releases it (it leaks), also
    ///   when the closure panics.
    /// * The scope stays in the caller's frame, out of the user's reach, on this thread,
    ///   and is dropped before `stream` can go.
    /// * Every copy-out registered in `outstanding` (a staged download writes its
    ///   destination from another thread, after the stream's work) is waited for before
    ///   the caller releases what it lent, also when the closure panics.
    pub(crate) unsafe fn owned(stream: &'env Stream, outstanding: &'s Outstanding) -> Self {
        Scope {
            stream,
            outstanding,
            // SAFETY: the second alternative of `ScopeToken::new`'s contract: this
            // function's own contract makes everything borrowed for `'env` outlive every
            // use of it, and keeps the token (in the scope) in the caller's frame.
            token: unsafe { ScopeToken::new(stream) },
            open: LazyOpenScope::default(),
            fork_event: super::KeptForkEvent::default(),
            reach: Default::default(),
            trace: Default::default(),
        }
    }
}

/// `Err(StreamCapturing)` when `stream` is being captured into a CUDA graph (the check
/// every scope makes before it starts).
pub(crate) fn refuse_capturing(stream: &Stream) -> Result<()> {
    super::exit::refuse_capturing(stream)
}
