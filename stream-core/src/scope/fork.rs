//! [`Scope::fork`]: work on a second stream inside a scope, started and joined by
//! events, with parent memory lent to the child for the length of the fork.
//!
//! `s.fork(&other, lent, |c, views| ...)` runs the closure with a child scope `c` on
//! `other`. The child's stream first waits (on the GPU) for everything the parent had
//! enqueued; when the closure returns, or unwinds, the parent's stream waits for
//! everything the child enqueued. The host never blocks, so work the closure issues on
//! the parent and on the child runs concurrently.
//!
//! The soundness argument is in the docs of [`Scope::fork`], where users read it.

use crate::device::peer::grant_reach;
use crate::device::{stream::abort_unreleasable, Event, Stream};
use crate::driver::context::Bound;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::memory::brand::Rebrand;
use crate::scope::exit::{abort_unwinding, refuse_capturing};
use crate::scope::lend::LendPermit;
use crate::scope::{Lend, Scope};
use crate::trace::Category;

impl<'s, 'env> Scope<'s, 'env> {
    /// Runs `f` with a child scope on `stream` and views of the memory in `lent`,
    /// ordered after the work this scope has enqueued so far; when `f` returns (or
    /// unwinds), this scope's stream waits for the child's work. Neither step blocks
    /// the host.
    ///
    /// `lent` is `()`, one item, or a tuple of up to six items (see [`Lend`]):
    /// `&x` lends a read-only view, `&mut x` a writable one, a buffer moved in is
    /// handed to the child, and `Some(item)` or `None` lends the item or nothing.
    ///
    /// Work the GPU should start ahead of the parent's, such as a collective overlapped
    /// with the parent's kernels, goes on a stream of the device's most urgent priority
    /// ([`Device::new_stream_with_priority`](crate::Device::new_stream_with_priority)):
    /// see the [`nccl`](crate::nccl) module's "Overlapping a collective with
    /// computation".
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(a: &Stream, b: &Stream, input: &[f32], out: &mut [f32], out2: &mut [f32]) -> Result<(), Error> {
    /// scope(a, |s| {
    ///     let x = s.upload(input)?;
    ///     let mut y = s.alloc::<f32>(x.len())?;
    ///     s.fork(b, (&x, &mut y), |c, (x, mut y)| {
    ///         c.copy_device(&x, &mut y)?;          // on `b`, after the upload on `a`
    ///         Ok::<_, Error>(())
    ///     })?;                                   // `a` now waits for `b`, the host does not
    ///     s.copy_to_host(&y, out)?;              // ordered after the child's copy
    ///     s.copy_to_host(&x, out2)?;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    ///
    /// With `b` a stream of another GPU, the same code runs the copy on that GPU, reading
    /// and writing the first GPU's memory over NVLink (`tests/test_peer.rs`);
    /// [`scope_all!`](crate::scope_all) opens sibling scopes on several streams this way.
    ///
    /// * The closure returns `Result<T, E>` with `E: From<Error>`, like
    ///   [`scope`](fn@crate::scope)'s; `T` may hold buffers the child [handed
    ///   off](Scope::hand_off) to this scope.
    /// * `stream` must not be capturing a graph ([`Error::StreamCapturing`]).
    /// * `stream` may belong to another device. Then the child's context is bound while
    ///   `f` runs (and the previous one restored after it, also on unwind), the start and
    ///   the join are events of each side's own context, and the memory lent stays where
    ///   it is: the child's kernels and copies reach it over the peer path (NVLink or
    ///   PCIe). When `lent` holds memory (it is not `()`, a `None`, or a tuple of
    ///   those), before anything is enqueued, the pool of every device whose memory this
    ///   scope may lend (its own, and any lent or handed to it) grants the child's device
    ///   access, once per pair for the process, or the fork returns
    ///   [`Error::PeerAccessUnavailable`] naming the pair ([`Scope::hand_off`] checks the
    ///   same when a buffer crosses later). The parent's operations stay usable inside
    ///   `f` and bind the parent's context where the driver needs it.
    /// * If the join cannot be enqueued, the child's stream is synchronised on the host
    ///   instead and the error is returned. If even that fails, the error is returned
    ///   only when it is sticky ([`Error::is_sticky`]: the context has stopped, so the
    ///   child's work has too); any other failure, and any failure while unwinding,
    ///   aborts the process, as in [`scope`](fn@crate::scope).
    ///
    /// # Why the lifetimes make this sound
    ///
    /// The child is a [`Scope<'c, 'env>`](Scope) with a fresh brand `'c` and the *parent's*
    /// `'env`. Three facts carry the argument:
    ///
    /// 1. **Host memory and attached [`DeviceVec`](crate::DeviceVec)s are borrowed for
    ///    `'env`**, in the child as in every scope. `'env` lasts until the outermost scope
    ///    returns, which is after its final synchronisation. The join makes that
    ///    synchronisation cover the child's work (the parent's stream waits for the child,
    ///    and the outermost scope waits for its stream), so nothing the child reads or
    ///    writes on the host is released before the child's work is done, although `fork`
    ///    returns without blocking.
    /// 2. **The child's brand `'c` is fresh and invariant**, so the child's buffers cannot
    ///    be used by the parent, nor the parent's by the child, except as views lent at the
    ///    fork (ordered by the start event) or through [`Scope::hand_off`] (ordered by its
    ///    own event). The child's buffers are freed on the child's stream when the closure
    ///    ends, before the join.
    /// 3. **Lent memory is borrowed by the `fork` call itself** (see [`Lend`]): shared
    ///    (`&x`: the parent may still read it, not write or free it) or exclusively
    ///    (`&mut x`: the parent cannot touch it) until `fork` returns, after the join was
    ///    enqueued. The parent's later work on it, its free included, is therefore ordered
    ///    after the child's; its earlier work is ordered before, by the start event. A
    ///    buffer lent by value is handed off: the child frees it.
    ///
    /// Why lend at the fork rather than from inside the closure: the child's brand is a
    /// higher-ranked lifetime, and the compiler cannot bound it by a borrow of a local of
    /// the parent's closure; a borrow made by the `fork` call has an ordinary lifetime that
    /// covers the whole fork.
    ///
    /// The parent cannot write memory it lent until the fork ends (see
    /// `ui-tests/tests/ui/fork/parent-writes-lent-buffer.rs`):
    ///
    /// ```compile_fail,E0502
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(a: &Stream, b: &Stream, out: &mut [f32]) -> Result<(), Error> {
    /// scope(a, |s| {
    ///     let mut x = s.alloc_zeroed::<f32>(16)?;
    ///     s.fork(b, &x, |c, v| {
    ///         c.copy_to_host(&v, out)?;
    ///         s.fill(&mut x, 1.0)?; // error: `x` is lent to the child for the whole fork
    ///         Ok::<_, Error>(())
    ///     })
    /// })
    /// # }
    /// ```
    pub fn fork<L, F, T, E>(&self, stream: &'env Stream, lent: L, f: F) -> std::result::Result<T, E>
    where
        L: Lend<'s>,
        F: for<'c> FnOnce(&'c Scope<'c, 'env>, L::Views<'c>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::fork");
        refuse_capturing(stream).map_err(E::from)?;
        let context = &stream.device.inner.context;
        let across = stream.device.inner.device != self.device().inner.device;
        // Traced: the fork's point on this stream, before the child's stream waits.
        let fork_from = self.trace_point("fork", Category::Fork);
        // Onto another device's stream: the child's context is bound for the closure
        // (given back after it, also on unwind), the child's stream waits for this scope's
        // work through an event of this scope's context, and the join uses an event of the
        // child's (an event is recorded only on streams of its own context).
        let lends_memory = lent.lends_memory();
        let child_context = match across {
            true => Some(self.start_across(stream, lends_memory).map_err(E::from)?),
            false => None,
        };
        // On one device, one event orders both ways: the child waits for its first
        // record, and the parent for its second (a wait captures the state of the record
        // before it, so re-recording is safe, also at once by this scope's next fork,
        // which takes it from `fork_event` instead of the thread's spares).
        let event = match self.fork_event.take() {
            Some(kept) if kept.belongs_to(context) => kept,
            other => {
                drop(other);
                Event::cached(context).map_err(E::from)?
            }
        };
        if !across {
            event
                .reorder(&self.stream.raw, &stream.raw)
                .map_err(E::from)?;
        }
        let join = JoinOnExit {
            child: stream,
            parent: &self.stream.raw,
            event: &event,
        };
        // SAFETY: `join` makes this scope's stream wait for the child's (or synchronises
        // the child's, or aborts) when this function returns or unwinds, and this scope's
        // stream is covered by the outermost scope's synchronisation, before `'env` ends;
        // the child registers its copy-outs in this scope's list, which that outermost
        // scope waits for; the child scope stays in this frame.
        let child = unsafe { Scope::branded(stream, self.outstanding) };
        self.pass_trace_to(&child);
        self.trace_flow("fork", fork_from, child.trace_point("fork", Category::Fork));
        // Whatever this scope may lend, the child may hold.
        match across {
            true if lends_memory => child.widen_reach(self.reach()),
            true => {}
            false => child.copy_reach(self),
        }
        if self.open.is_noted() {
            // The parent has memory of its own, which `lent` may move to the child, to be
            // freed on the child's stream.
            child.note_frees();
        }
        // SAFETY: the child scope branded by this permit runs on `stream`, which waits for
        // this scope's work so far (the event above), and `join` orders this scope's later
        // work after the child's before `lent`'s borrows end (they last for this call);
        // a buffer moved in is the child's from now on.
        let permit = LendPermit(unsafe { Rebrand::new(&stream.raw) });
        let views = lent.lend(&permit);
        let out = f(&child, views);
        let join_from = child.trace_point("join", Category::Join);
        // This scope's context current again before the join, whose wait needs it (on
        // unwind the join runs first and binds it itself).
        drop(child_context);
        let joined = join.finish();
        if joined.is_ok() {
            self.trace_flow("join", join_from, self.trace_point("join", Category::Join));
        }
        self.fork_event.keep(event);
        match (out, joined) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(E::from(e)),
            (Ok(v), Ok(())) => Ok(v),
        }
    }
}

impl<'s, 'env> Scope<'s, 'env> {
    /// The start of a fork onto `stream`, of another device: when the fork lends memory,
    /// that device may reach the memory of every device this scope's brand may be on
    /// (what it can lend; [`Error::PeerAccessUnavailable`]
    /// otherwise, before anything is enqueued); the child's stream waits for this
    /// scope's work so far, and the child's context is bound until the returned guard
    /// drops.
    #[cold]
    #[inline(never)]
    fn start_across(&self, stream: &'env Stream, lends_memory: bool) -> Result<Bound<'env>> {
        let child_device = &stream.device.inner;
        if lends_memory {
            grant_reach(child_device, self.reach(), &self.device().inner)?;
        }
        // Bound first: the child's stream's wait needs its context current.
        let bound = child_device.context.bind()?;
        Event::order(&self.device().inner.context, &self.stream.raw, &stream.raw)?;
        Ok(bound)
    }
}

/// Makes the parent's stream wait for the child's when the fork ends: [`finish`] on
/// normal return, `Drop` while unwinding. It lives in `fork`'s own frame, out of the
/// user's reach.
///
/// [`finish`]: JoinOnExit::finish
struct JoinOnExit<'env, 'e> {
    child: &'env Stream,
    /// The parent scope's stream.
    parent: &'env RawStream,
    /// The fork's event (of the child's context), recorded on the child for the join.
    event: &'e Event,
}

impl JoinOnExit<'_, '_> {
    /// Normal return. If neither the event join nor the host fallback worked, the
    /// child's work may still be running while the parent goes on to free or reuse
    /// what it lent: only a sticky error, which proves the context stopped, may be
    /// returned; any other failure aborts.
    #[inline]
    fn finish(self) -> Result<()> {
        let joined = self.join();
        // Joined: `Drop` would join again, and `self` holds only borrows, so there is
        // nothing else to drop.
        std::mem::forget(self);
        match joined {
            Joined::ByEvent => Ok(()),
            Joined::ByHost(e) => Err(e),
            Joined::Failed(e) if e.is_sticky() => Err(e),
            Joined::Failed(e) => abort_unreleasable("joining a fork", &e),
        }
    }

    /// Enqueues the join; if that fails, waits for the child's stream on the host
    /// instead (with the child's context bound), so that the outermost scope's
    /// synchronisation still covers the child.
    #[inline]
    fn join(&self) -> Joined {
        let Err(error) = self.event.reorder(&self.child.raw, self.parent) else {
            return Joined::ByEvent;
        };
        match self.child.synchronize() {
            Ok(()) => Joined::ByHost(error),
            Err(sync_error) => Joined::Failed(sync_error),
        }
    }
}

/// How the child's work was ordered before the parent's later work.
enum Joined {
    /// The parent's stream waits on an event recorded after the child's work.
    ByEvent,
    /// Enqueuing the join failed (the error), but the child's stream was synchronised.
    ByHost(Error),
    /// Neither worked: the child's work may still be running.
    Failed(Error),
}

impl Drop for JoinOnExit<'_, '_> {
    /// Runs only while unwinding out of the closure (the normal path forgets `self`).
    fn drop(&mut self) {
        if let Joined::Failed(e) = self.join() {
            abort_unwinding("a fork is unwinding from a panic", &e);
        }
    }
}
