//! Invariant lifetime markers ("brands").
//!
//! Every scope gets a fresh lifetime `'s` from the higher-ranked closure bound of
//! [`scope`](fn@crate::scope). Types that carry `'s` hold a [`Brand`], which makes them
//! *invariant* in `'s`: the compiler may neither shorten nor lengthen the brand, so
//! memory branded by one scope can never be passed to, stored in, or returned from
//! another one (two distinct universally quantified lifetimes never unify).
//! The model is `std::thread::scope` and the generativity crate.

use std::marker::PhantomData;

use crate::device::{Device, Stream};
use crate::driver::stream::RawStream;

/// Invariant in `'s` (a `fn(&'s ()) -> &'s ()` is contravariant in its argument and
/// covariant in its result, so both directions of subtyping are ruled out), and
/// neither `Send` nor `Sync` (a raw pointer is neither): branded values are driven from
/// the thread that opened the scope, which registered the scope for the out-of-memory
/// recovery and synchronises it at its end.
///
/// Every other field of a branded type is `Send` and `Sync`, so the compiler's error
/// for a branded value sent to another thread names this marker (see
/// `ui-tests/tests/ui/thread/`).
pub(crate) type Brand<'s> =
    PhantomData<(fn(&'s ()) -> &'s (), *const UsedOnlyOnTheThreadOfItsScope)>;

/// Named so that the compiler's error for a scope, or anything branded by one, sent or
/// shared to another thread reads as the reason:
/// "`*const UsedOnlyOnTheThreadOfItsScope` cannot be sent between threads safely".
pub(crate) enum UsedOnlyOnTheThreadOfItsScope {}

/// Makes a brand value. Zero-sized; it exists so that call sites read as intent.
#[inline(always)]
pub(crate) const fn brand<'s>() -> Brand<'s> {
    PhantomData
}

/// The proof a [`Scope`](crate::Scope) carries: the scope branded `'s` issues its work
/// on `stream`, and that stream is synchronised (or joined by an event into a stream that
/// is) before `'env` ends, also on unwind. Memory constructors that take it are safe:
/// memory they brand `'s` is used on `stream` only, and host or `DeviceVec` memory
/// borrowed for `'env` outlives every use.
///
/// Only `scope` and `fork` make one ([`ScopeToken::new`] is `unsafe`), and the scope
/// that holds it stays in their frame.
pub(crate) struct ScopeToken<'s, 'env> {
    stream: &'env Stream,
    _brand: Brand<'s>,
    /// Invariant in `'env`, like the scope.
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'s, 'env> ScopeToken<'s, 'env> {
    /// # Safety
    ///
    /// `stream` is synchronised, or joined by an event into a stream that is, before
    /// `'env` ends (also on unwind), **or** `'env` is a higher-ranked lifetime of the
    /// user's closure and everything that closure can borrow for `'env` is `'static` or
    /// owned by the token's creator, which keeps it untouched until the stream's work
    /// has completed (an owned scope, made by `Scope::branded`); and the token stays in its
    /// creator's frame, out of the user's reach, on this thread; `'s` is a fresh brand.
    #[inline]
    pub(crate) unsafe fn new(stream: &'env Stream) -> Self {
        ScopeToken {
            stream,
            _brand: brand(),
            _env: PhantomData,
        }
    }

    /// The scope's stream.
    #[inline(always)]
    pub(crate) fn stream(&self) -> &'env Stream {
        self.stream
    }
}

/// The proof that memory branded `'s` may be used by the scope branded `'t`, on `to`:
/// `to` waits (by an event) for everything the stream of `'s` had enqueued when this was
/// made, and `'s` uses that memory again only after `'t`'s work has been joined back
/// (a fork's lend) or never (a hand-off, or a buffer moved into a fork).
pub(crate) struct Rebrand<'s, 't> {
    to: &'t RawStream,
    _from: Brand<'s>,
    _to: Brand<'t>,
}

impl<'s, 't> Rebrand<'s, 't> {
    /// # Safety
    ///
    /// `to` is the stream of the scope branded `'t`; it waits for everything the stream
    /// of the scope branded `'s` has enqueued so far; and memory of `'s` viewed or moved
    /// through this permit is used by `'s` again only after `'t`'s work is ordered
    /// before that use (the fork's join, while the lend's borrow lasts), or never.
    pub(crate) unsafe fn new(to: &'t RawStream) -> Self {
        Rebrand {
            to,
            _from: brand(),
            _to: brand(),
        }
    }

    /// The stream of `'t`.
    #[inline(always)]
    pub(crate) fn to(&self) -> &'t RawStream {
        self.to
    }
}

/// What [`Lend::lend`](crate::Lend) needs: the proof that the child's stream waits for
/// the parent's work so far and that the fork's join will order the parent's later work
/// after the child's. Only `fork` can make one (its field is crate-private).
#[doc(hidden)]
pub struct LendPermit<'s, 'c>(pub(crate) Rebrand<'s, 'c>);

/// The proof a graph capture carries for the memory its graph holds: work branded `'s`
/// is recorded into one graph and runs only when that graph is replayed; memory viewed
/// through this token (a [`DeviceVec`](crate::DeviceVec) or a pinned buffer lent to the
/// capture) is owned or borrowed by that graph for as long as it exists (shared for a
/// read-only view, exclusively for a writable one); and every replay borrows the graph
/// exclusively until it is known to be complete. Memory constructors that take it are
/// safe: what they view outlives every use, and nothing outside the graph writes what
/// the graph reads or touches what it writes while a replay may run.
///
/// Only a capture makes one ([`HoldToken::new`] is `unsafe`), in its own frame.
pub(crate) struct HoldToken<'s> {
    device: &'s Device,
    _brand: Brand<'s>,
}

impl<'s> HoldToken<'s> {
    /// # Safety
    ///
    /// Work branded `'s` is recorded into a graph of `device` (never run directly), and
    /// that graph keeps everything passed to a constructor with this token borrowed
    /// (shared or exclusively, as the constructor takes it) or owned for its whole life,
    /// and is replayed only through an exclusive borrow that lasts until the replay is
    /// complete; `'s` is a fresh brand and the token stays in its creator's frame.
    pub(crate) unsafe fn new(device: &'s Device) -> Self {
        HoldToken {
            device,
            _brand: brand(),
        }
    }

    /// The device of the graph.
    #[inline(always)]
    pub(crate) fn device(&self) -> &'s Device {
        self.device
    }
}
