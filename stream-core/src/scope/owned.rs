//! The owned scope: a scope whose end is not a synchronisation, for
//! [`Stream::run_owned`](crate::Stream::run_owned) (see [`crate::future`], which holds the
//! argument in full).
//!
//! A [`scope`](fn@crate::scope) keeps the host memory its work uses borrowed for `'env` and
//! synchronises its stream before `'env` ends. An owned scope turns this around: `'env`
//! is a higher-ranked lifetime of the user's closure, so the only host memory (and
//! `DeviceVec`s) the closure can hand to work for `'env` is `'static` or lent by the
//! caller from values the caller owns; the caller keeps those values, unmoved and
//! untouched, until an event recorded after the scope's work is seen complete. `'env`
//! then ends when the closure returns, long before the GPU is done, and no thread blocks.
//! It is made by `Scope::branded`, under the second alternative of its contract.

use crate::device::Stream;
use crate::error::Result;

/// `Err(StreamCapturing)` when `stream` is being captured into a CUDA graph (the check
/// every scope makes before it starts).
pub(crate) fn refuse_capturing(stream: &Stream) -> Result<()> {
    super::exit::refuse_capturing(stream)
}
