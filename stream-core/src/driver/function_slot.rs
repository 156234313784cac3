//! [`FunctionSlot`]: a kernel's function on one device, kept where launches find it
//! without a lock.

use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

use cudarc::driver::sys;

use super::module::Function;

/// A [`Function`] kept for one owner (a device's unique id, never 0), read without a
/// lock, and replaced when another owner keeps its own: each `Kernel` keeps one per
/// ordinal, so that the device of that ordinal which launched the kernel last launches
/// it again without the module cache's lock, a device made again included.
///
/// A sequence lock: the sequence is odd while a store is in progress and grows by two
/// with each store; a read that saw it odd, or changed while it read, gets `None` (the
/// caller then takes the slow path), so a read never pairs one owner with another's
/// function. A store that finds another in progress keeps nothing.
#[derive(Debug)]
pub(crate) struct FunctionSlot {
    sequence: AtomicU64,
    /// The owner's id, 0 while nothing is kept.
    owner: AtomicU64,
    raw: AtomicPtr<sys::CUfunc_st>,
    /// `max_threads_per_block` in the high 32 bits, `static_shared_bytes` in the low.
    limits: AtomicU64,
}

impl FunctionSlot {
    /// A slot that keeps nothing.
    pub(crate) const fn new() -> Self {
        FunctionSlot {
            sequence: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            raw: AtomicPtr::new(std::ptr::null_mut()),
            limits: AtomicU64::new(0),
        }
    }

    /// The function kept for `owner`, if it is the one kept now.
    #[inline]
    pub(crate) fn get(&self, owner: u64) -> Option<Function> {
        let before = self.sequence.load(Ordering::Acquire);
        let kept = self.owner.load(Ordering::Relaxed);
        let raw = self.raw.load(Ordering::Relaxed);
        let limits = self.limits.load(Ordering::Relaxed);
        // Orders the loads above before the second look at the sequence: a value stored
        // by a store that began after `before` makes that look see a new sequence.
        fence(Ordering::Acquire);
        let after = self.sequence.load(Ordering::Relaxed);
        if !before.is_multiple_of(2) || before != after || kept != owner || owner == 0 {
            return None;
        }
        Some(Function {
            raw,
            max_threads_per_block: (limits >> 32) as u32,
            static_shared_bytes: limits as u32,
        })
    }

    /// Keeps `function` for `owner` (not 0), in place of what was kept; nothing when
    /// another store is in progress.
    pub(crate) fn set(&self, owner: u64, function: &Function) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        if !sequence.is_multiple_of(2)
            || self
                .sequence
                .compare_exchange(sequence, sequence + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the odd sequence before the stores below, for the readers' fence.
        fence(Ordering::Release);
        self.owner.store(owner, Ordering::Relaxed);
        self.raw.store(function.raw, Ordering::Relaxed);
        let limits = (u64::from(function.max_threads_per_block) << 32)
            | u64::from(function.static_shared_bytes);
        self.limits.store(limits, Ordering::Relaxed);
        self.sequence.store(sequence + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function whose every field says which owner it was made for (its handle is
    /// never used: these tests only keep and compare it).
    fn function_of(owner: u64) -> Function {
        Function {
            raw: std::ptr::without_provenance_mut(owner as usize * 16),
            max_threads_per_block: owner as u32,
            static_shared_bytes: (owner as u32).wrapping_mul(3),
        }
    }

    fn is_of(function: &Function, owner: u64) -> bool {
        let expected = function_of(owner);
        function.raw == expected.raw
            && function.max_threads_per_block == expected.max_threads_per_block
            && function.static_shared_bytes == expected.static_shared_bytes
    }

    #[test]
    fn keeps_one_owners_function_until_another_owner_replaces_it() {
        let slot = FunctionSlot::new();
        assert!(slot.get(1).is_none(), "an empty slot keeps nothing");
        assert!(slot.get(0).is_none(), "0 is nobody's id");
        slot.set(1, &function_of(1));
        assert!(slot.get(1).is_some_and(|f| is_of(&f, 1)));
        assert!(slot.get(2).is_none());
        slot.set(2, &function_of(2));
        assert!(
            slot.get(1).is_none(),
            "the first owner's function was replaced"
        );
        assert!(slot.get(2).is_some_and(|f| is_of(&f, 2)));
        slot.set(1, &function_of(1));
        assert!(slot.get(1).is_some_and(|f| is_of(&f, 1)));
    }

    /// Writers replacing each other's functions while readers read: a read that returns
    /// a function returns the one made for the owner it asked about, never a mix.
    #[test]
    fn a_read_never_pairs_one_owner_with_anothers_function() {
        let slot = FunctionSlot::new();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (hits, torn) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|t| {
            for first in [1u64, 3] {
                let (slot, stop) = (&slot, &stop);
                t.spawn(move || {
                    let mut owner = first;
                    while !stop.load(Ordering::Relaxed) {
                        // Bursts of stores, then a turn for the readers, so that some
                        // reads find no store in progress.
                        for _ in 0..64 {
                            slot.set(owner, &function_of(owner));
                            owner = if owner == first { first + 1 } else { first };
                        }
                        std::thread::yield_now();
                    }
                });
            }
            let readers: Vec<_> = (1..=4u64)
                .map(|owner| {
                    let (slot, hits, torn) = (&slot, &hits, &torn);
                    t.spawn(move || {
                        for _ in 0..200_000 {
                            if let Some(function) = slot.get(owner) {
                                let counter = if is_of(&function, owner) { hits } else { torn };
                                counter.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for reader in readers {
                let _ = reader.join();
            }
            // The writers stop before any verdict, so that a failure cannot hang.
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(
            torn.load(Ordering::Relaxed),
            0,
            "reads paired an owner with another's function"
        );
        assert!(
            hits.load(Ordering::Relaxed) > 0,
            "no read found its owner's function"
        );
    }
}
