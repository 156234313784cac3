//! How the ledger numbers the members' calls: [`Numbering`] (which of NCCL's orders a
//! call meets its partners in), [`Line`] (one numbering's state: the numbers each
//! member took and the calls waiting for the others), and the small-key [`Map`] that
//! holds one line per numbering.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::Call;

/// One of NCCL's orders, in which members' calls meet by number: a communicator's
/// collectives (every member's n-th meets every other's n-th), the sends from rank
/// `from` to rank `to` with the receives of `to` from `from` (the n-th send with the
/// n-th receive), and the splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Numbering {
    Collectives,
    Pair { from: usize, to: usize },
    Splits,
}

impl Numbering {
    /// `true` when a call of this numbering needs member `rank` to complete: every
    /// member for a collective, its two ends for a pair (splits are not compared).
    pub(super) fn needs(self, rank: usize) -> bool {
        match self {
            Numbering::Collectives => true,
            Numbering::Pair { from, to } => rank == from || rank == to,
            Numbering::Splits => false,
        }
    }
}

/// A numbering's state: how many numbers each member has taken, and the calls some
/// member made that not every member has reached yet. Every member takes the numbers
/// in order, so those calls are recorded in number order and leave from the front
/// (the last member to reach a number has reached every smaller one): a queue.
#[derive(Default)]
pub(super) struct Line {
    /// (rank, numbers taken) of each member that has taken one.
    taken: Vec<(usize, u64)>,
    pub(super) waiting: VecDeque<Waiting>,
}

impl Line {
    /// Member `rank`'s next number, counted as taken.
    #[inline]
    pub(super) fn take(&mut self, rank: usize) -> u64 {
        let index = match self.taken.iter().position(|&(r, _)| r == rank) {
            Some(index) => index,
            None => {
                self.taken.push((rank, 0));
                self.taken.len() - 1
            }
        };
        let count = &mut self.taken[index].1;
        *count += 1;
        *count - 1
    }

    /// How many numbers member `rank` has taken: the number its next call takes.
    pub(super) fn taken_by(&self, rank: usize) -> u64 {
        self.taken
            .iter()
            .find(|&&(r, _)| r == rank)
            .map_or(0, |&(_, count)| count)
    }

    /// Where the call of `number` waits, if one does: usually at the front (the
    /// member behind); past the back for the member ahead.
    #[inline]
    pub(super) fn find(&self, number: u64) -> Option<usize> {
        match self.waiting.back() {
            Some(last) if last.number >= number => self
                .waiting
                .binary_search_by_key(&number, |w| w.number)
                .ok(),
            _ => None,
        }
    }
}

/// The first call made at a number, and how many members have reached it.
pub(super) struct Waiting {
    pub(super) number: u64,
    pub(super) rank: usize,
    pub(super) call: Call,
    pub(super) arrivals: usize,
}

/// A multiply-rotate hash of the ledger's small integer keys: with the standard
/// SipHash a call's check cost 87 ns, with this 42 ns (two members, a 2-core host,
/// when a call looked up three keys; it looks up one now).
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn write_isize(&mut self, word: isize) {
        self.write_u64(word as u64);
    }
}

/// A map keyed by the ledger's small keys.
pub(super) type Map<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;
