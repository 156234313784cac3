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
/// neither `Send` nor `Sync`: branded values are driven from the thread that opened
/// the scope, where the scope's CUDA context is current.
pub(crate) type Brand<'s> = PhantomData<(fn(&'s ()) -> &'s (), *const ())>;

/// Makes a brand value. Zero-sized; it exists so that call sites read as intent.
#[inline(always)]
pub(crate) const fn brand<'s>() -> Brand<'s> {
    PhantomData
}
