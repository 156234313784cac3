//! Invariant lifetime markers ("brands").
//!
//! Every scope gets a fresh lifetime `'s` from the higher-ranked closure bound of
//! [`scope`](crate::scope). Types that carry `'s` hold a [`Brand`], which makes them
//! *invariant* in `'s`: the compiler may neither shorten nor lengthen the brand, so
//! memory branded by one scope can never be passed to, stored in, or returned from
//! another one (two distinct universally quantified lifetimes never unify).
//! The model is `std::thread::scope` and the generativity crate.

use std::marker::PhantomData;

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
