//! [`ManagedAdvice`]: typed `cuMemAdvise` hints for a [`ManagedVec`], in CUDA 13's
//! location form ([`ManagedLocation`]: a device or the host).

use crate::device::Device;
use crate::driver::managed::{Advice, Location};
use crate::error::Result;
use crate::managed::ManagedVec;
use crate::memory::DeviceRepr;

/// Where managed memory may live or be read from: a GPU, or the host.
#[derive(Debug, Clone, Copy)]
pub enum ManagedLocation<'d> {
    /// This device's memory.
    Device(&'d Device),
    /// Host memory.
    Host,
}

impl ManagedLocation<'_> {
    fn raw(self) -> Location {
        match self {
            ManagedLocation::Device(device) => Location::Device(device.inner.device),
            ManagedLocation::Host => Location::Host,
        }
    }
}

/// A hint about how a [`ManagedVec`] is used (`cuMemAdvise`). Hints decide where pages
/// live and how they migrate; they never change what the memory holds, so every hint is
/// safe at any time.
///
/// ```no_run
/// use stream_core::{Device, ManagedAdvice, ManagedLocation};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let weights = dev.alloc_managed::<f32>(1 << 20)?;
/// weights.advise(ManagedAdvice::ReadMostly)?;                       // copies, not migrations
/// weights.advise(ManagedAdvice::PreferredLocation(ManagedLocation::Device(&dev)))?;
/// weights.advise(ManagedAdvice::AccessedBy(ManagedLocation::Host))?; // mapped for the CPU
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub enum ManagedAdvice<'d> {
    /// Mostly read: a processor that reads it gets its own copy of the pages instead of
    /// migrating them; a write anywhere drops the copies (`SET_READ_MOSTLY`).
    ReadMostly,
    /// Undoes [`ReadMostly`](Self::ReadMostly) (`UNSET_READ_MOSTLY`).
    NotReadMostly,
    /// Keep the pages here when possible: other processors map them rather than migrate
    /// them, when they can (`SET_PREFERRED_LOCATION`).
    PreferredLocation(ManagedLocation<'d>),
    /// Undoes [`PreferredLocation`](Self::PreferredLocation) (`UNSET_PREFERRED_LOCATION`).
    NoPreferredLocation,
    /// This processor accesses the memory: keep it mapped there wherever the pages are,
    /// so that its accesses do not fault (`SET_ACCESSED_BY`).
    AccessedBy(ManagedLocation<'d>),
    /// Undoes [`AccessedBy`](Self::AccessedBy) for that processor (`UNSET_ACCESSED_BY`).
    NotAccessedBy(ManagedLocation<'d>),
}

impl ManagedAdvice<'_> {
    fn raw(self) -> Advice {
        match self {
            ManagedAdvice::ReadMostly => Advice::SetReadMostly,
            ManagedAdvice::NotReadMostly => Advice::UnsetReadMostly,
            ManagedAdvice::PreferredLocation(at) => Advice::SetPreferredLocation(at.raw()),
            ManagedAdvice::NoPreferredLocation => Advice::UnsetPreferredLocation,
            ManagedAdvice::AccessedBy(by) => Advice::SetAccessedBy(by.raw()),
            ManagedAdvice::NotAccessedBy(by) => Advice::UnsetAccessedBy(by.raw()),
        }
    }
}

impl<T: DeviceRepr> ManagedVec<T> {
    /// Gives the driver a hint about the whole vec (`cuMemAdvise`). Does not block, and
    /// works whether or not scopes use the vec (hints change no contents). An empty vec
    /// takes every hint and does nothing. The driver's refusal (a device that does not
    /// support the hint) is an [`Error::Driver`](crate::Error::Driver). See
    /// [`ManagedAdvice`] for an example.
    pub fn advise(&self, advice: ManagedAdvice<'_>) -> Result<()> {
        let Some(allocation) = &self.allocation else {
            return Ok(());
        };
        let inner = &self.device().inner;
        let bound = inner.bind()?;
        allocation.advise(advice.raw(), inner.device, &bound)
    }
}
