//! Peer access: letting one device's kernels and copies reach another device's memory.
//!
//! Every device allocation of this crate comes from its device's default pool, and a
//! pool's memory is reachable from another device only once the pool grants it access
//! (`cuMemPoolSetAccess`; a context's peer access does not extend to pool memory). Work
//! that would reach memory of a device without that grant faults
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`, sticky: the context is lost) or is refused, measured on
//! 2 H200s. So before a scope on one device may receive memory of another (a fork onto
//! another device's stream, a hand-off to a scope on another device), the pool of every
//! device whose memory it may receive grants it access, once per pair: or the operation
//! is [`Error::PeerAccessUnavailable`], naming the pair, before anything is enqueued.
//!
//! Which devices' memory a scope's brand may be on is a [`DeviceSet`] the scope keeps
//! (its own device, and those of memory lent or handed to it).

use std::sync::Arc;

use crate::driver::context::PrimaryContext;
use crate::driver::device::DeviceId;
use crate::driver::pool::MemPool;
use crate::error::{Error, Result};

use super::DeviceInner;

/// A set of devices by ordinal (ordinals 0 to 63; a device past those is never a peer of
/// another, see [`grant_reach`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeviceSet(u64);

impl DeviceSet {
    /// The set as bits (bit `ordinal`), for storing in an atomic.
    #[inline(always)]
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The set of `bits`.
    #[inline(always)]
    pub(crate) fn from_bits(bits: u64) -> Self {
        DeviceSet(bits)
    }

    /// The set of one device; empty past ordinal 63.
    #[inline(always)]
    pub(crate) fn of(ordinal: usize) -> Self {
        DeviceSet(1u64.checked_shl(ordinal as u32).unwrap_or(0))
    }

    /// Both sets together.
    #[inline(always)]
    pub(crate) fn union(self, other: DeviceSet) -> Self {
        DeviceSet(self.0 | other.0)
    }

    /// The ordinals in the set, lowest first.
    fn ordinals(self) -> impl Iterator<Item = usize> {
        (0..64).filter(move |bit| self.0 & (1 << bit) != 0)
    }
}

/// Lets `accessor`'s work reach the memory of every device in `owners` (its own
/// device, if in the set, needs nothing): each owner's pool grants it access, once per
/// pair while the owner's context lives. `known` is an owner whose handle the caller has
/// (the scope's own device, the common case), looked up without the process-wide list
/// of contexts.
///
/// [`Error::PeerAccessUnavailable`] names the first pair without a peer path (or with an
/// ordinal past 63, which this crate does not track).
pub(crate) fn grant_reach(
    accessor: &DeviceInner,
    owners: DeviceSet,
    known: &DeviceInner,
) -> Result<()> {
    let me = DeviceSet::of(accessor.ordinal);
    let unavailable = |peer: usize| Error::PeerAccessUnavailable {
        device: accessor.ordinal,
        peer,
    };
    if me.bits() == 0 || known.ordinal >= 64 {
        return Err(unavailable(known.ordinal));
    }
    for owner in owners.ordinals() {
        if owner == accessor.ordinal {
            continue;
        }
        let held;
        let context: &PrimaryContext = if owner == known.ordinal {
            &known.context
        } else {
            // Memory of `owner` is alive in the scope, so its context is retained: this
            // finds it (and would retain it for the call otherwise).
            held = PrimaryContext::of(DeviceId::get(owner)?)?;
            Arc::as_ref(&held)
        };
        if context.pool_grants() & me.bits() != 0 {
            continue;
        }
        if !accessor.device.can_access_peer(context.device())? {
            return Err(unavailable(owner));
        }
        MemPool::default_of(context.device())?.grant_access(accessor.device)?;
        context.note_pool_grants(me.bits());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::DeviceSet;

    #[test]
    fn a_device_set_holds_ordinals_0_to_63_and_nothing_past() {
        let set = DeviceSet::of(0)
            .union(DeviceSet::of(5))
            .union(DeviceSet::of(63));
        assert_eq!(set.ordinals().collect::<Vec<_>>(), [0, 5, 63]);
        assert_eq!(DeviceSet::of(64), DeviceSet::default());
        assert_eq!(DeviceSet::from_bits(set.bits()), set);
    }
}
