//! [`FunctionSlot`]: a kernel's function on one device, kept where launches find it
//! without a lock.

use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

use cudarc::driver::sys;

use super::module::Function;

/// A [`Function`] kept for one owner (a device's unique id, never 0) and read without
/// a lock: each `Kernel` keeps one per ordinal, for the first live device of that
/// ordinal that launched it, until that device releases it as it is dropped; then the
/// next device of the ordinal to launch the kernel keeps its own (a device made again).
/// A second live device of the ordinal finds the slot taken and looks its function up
/// in its own module cache, so the first one's launches never lose the slot to it.
///
/// A sequence lock: the sequence is odd while a store is in progress and grows by two
/// with each; a read that saw it odd, or changed while it read, gets `None` (the caller
/// then takes the slow path), so a read never pairs one owner with another's function.
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

    /// Keeps `function` for `owner` (not 0) if the slot keeps nothing (and no other
    /// store is in progress); else leaves it as it is.
    pub(crate) fn keep(&self, owner: u64, function: &Function) {
        if self.owner.load(Ordering::Relaxed) != 0 {
            return;
        }
        let Some(sequence) = self.try_lock() else {
            return;
        };
        if self.owner.load(Ordering::Relaxed) == 0 {
            self.owner.store(owner, Ordering::Relaxed);
            self.raw.store(function.raw, Ordering::Relaxed);
            let limits = (u64::from(function.max_threads_per_block) << 32)
                | u64::from(function.static_shared_bytes);
            self.limits.store(limits, Ordering::Relaxed);
        }
        self.unlock(sequence);
    }

    /// Empties the slot if it keeps `owner`'s function (the owner is going away), so
    /// that the next device of the ordinal keeps its own; waits out a store in progress
    /// (a few stores long) rather than leave the slot to an owner that is gone.
    pub(crate) fn release(&self, owner: u64) {
        if self.owner.load(Ordering::Relaxed) != owner {
            return;
        }
        let sequence = loop {
            match self.try_lock() {
                Some(sequence) => break sequence,
                None => std::hint::spin_loop(),
            }
        };
        if self.owner.load(Ordering::Relaxed) == owner {
            self.owner.store(0, Ordering::Relaxed);
        }
        self.unlock(sequence);
    }

    /// Makes the sequence odd, if it is even, and returns the even value it had.
    fn try_lock(&self) -> Option<u64> {
        let sequence = self.sequence.load(Ordering::Relaxed);
        if !sequence.is_multiple_of(2) {
            return None;
        }
        self.sequence
            .compare_exchange(sequence, sequence + 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // Orders the odd sequence before the stores that follow, for the readers' fence.
        fence(Ordering::Release);
        Some(sequence)
    }

    /// Ends the store that [`try_lock`](Self::try_lock) began at `sequence`.
    fn unlock(&self, sequence: u64) {
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
    fn keeps_the_first_owners_function_until_that_owner_releases_it() {
        let slot = FunctionSlot::new();
        assert!(slot.get(1).is_none(), "an empty slot keeps nothing");
        assert!(slot.get(0).is_none(), "0 is nobody's id");
        slot.keep(1, &function_of(1));
        assert!(slot.get(1).is_some_and(|f| is_of(&f, 1)));
        slot.keep(2, &function_of(2));
        assert!(
            slot.get(2).is_none(),
            "a second owner does not take a kept slot"
        );
        assert!(slot.get(1).is_some_and(|f| is_of(&f, 1)));
        slot.release(2);
        assert!(slot.get(1).is_some(), "only the owner releases the slot");
        slot.release(1);
        assert!(slot.get(1).is_none(), "a released slot keeps nothing");
        slot.keep(2, &function_of(2));
        assert!(slot.get(2).is_some_and(|f| is_of(&f, 2)));
    }

    /// Writers keeping and releasing their functions while readers read: a read that
    /// returns a function returns the one made for the owner it asked about, never a mix.
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
                            slot.keep(owner, &function_of(owner));
                            // Kept for a moment, for the readers to find.
                            (0..32).for_each(|_| std::hint::spin_loop());
                            slot.release(owner);
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
                        // 200 000 reads, and on until one found its function (at most
                        // ten seconds: on a busy machine the writers may hold the slot
                        // through many reads).
                        let give_up =
                            std::time::Instant::now() + std::time::Duration::from_secs(10);
                        let mut found = false;
                        for read in 0u64.. {
                            if read >= 200_000 && (found || std::time::Instant::now() > give_up) {
                                break;
                            }
                            if let Some(function) = slot.get(owner) {
                                let good = is_of(&function, owner);
                                found |= good;
                                let counter = if good { hits } else { torn };
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
