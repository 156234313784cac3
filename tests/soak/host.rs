//! Host memory for the soak's transfers: pageable (`Vec`) or pinned (`PinnedBuffer`),
//! drawn at random, with the pinned bytes this program holds counted so that the end
//! of the run can show them back at zero.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use gpu_tests::{poison, Element, Failed, Rng};
use stream_core::{Device, PinnedBuffer};

/// Pinned bytes held by live [`Host`] buffers, and the most ever held at once.
static PINNED_LIVE: AtomicU64 = AtomicU64::new(0);
static PINNED_PEAK: AtomicU64 = AtomicU64::new(0);
/// Pinned allocations made, and their bytes.
static PINNED_ALLOCS: AtomicU64 = AtomicU64::new(0);
static PINNED_ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

/// `(live, peak, allocations, bytes allocated)` of this program's pinned buffers.
pub(crate) fn pinned_counters() -> (u64, u64, u64, u64) {
    (
        PINNED_LIVE.load(Ordering::Relaxed),
        PINNED_PEAK.load(Ordering::Relaxed),
        PINNED_ALLOCS.load(Ordering::Relaxed),
        PINNED_ALLOC_BYTES.load(Ordering::Relaxed),
    )
}

/// Host memory of `T`s, pageable or pinned.
pub(crate) enum Host<T: Element> {
    Pageable(Vec<T>),
    Pinned(PinnedBuffer<T>),
}

impl<T: Element> Host<T> {
    /// `len` elements, pinned with probability one half, not yet written.
    fn any(dev: &Device, rng: &mut Rng, len: usize) -> Result<Self, Failed> {
        if rng.below(2) == 0 {
            return Ok(Host::Pageable(vec![T::ZERO; len]));
        }
        let buf = dev.alloc_pinned::<T>(len)?;
        let bytes = (len * std::mem::size_of::<T>()) as u64;
        let live = PINNED_LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PINNED_PEAK.fetch_max(live, Ordering::Relaxed);
        PINNED_ALLOCS.fetch_add(1, Ordering::Relaxed);
        PINNED_ALLOC_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Ok(Host::Pinned(buf))
    }

    /// `len` fresh random elements (see [`Rng::vec`]).
    pub(crate) fn random(dev: &Device, rng: &mut Rng, len: usize) -> Result<Self, Failed> {
        let mut host = Self::any(dev, rng, len)?;
        rng.fill(&mut host);
        Ok(host)
    }

    /// `len` poisoned elements: a destination whose unwritten elements show.
    pub(crate) fn poisoned(dev: &Device, rng: &mut Rng, len: usize) -> Result<Self, Failed> {
        let mut host = Self::any(dev, rng, len)?;
        poison(&mut host);
        Ok(host)
    }

    /// `pageable` or `pinned`, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Host::Pageable(_) => "pageable",
            Host::Pinned(_) => "pinned",
        }
    }
}

impl<T: Element> Deref for Host<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Host::Pageable(v) => v,
            Host::Pinned(p) => p,
        }
    }
}

impl<T: Element> DerefMut for Host<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Host::Pageable(v) => v,
            Host::Pinned(p) => p,
        }
    }
}

impl<T: Element> Drop for Host<T> {
    fn drop(&mut self) {
        if let Host::Pinned(p) = self {
            let bytes = (p.len() * std::mem::size_of::<T>()) as u64;
            PINNED_LIVE.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}
