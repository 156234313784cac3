//! A rank's sends to itself and its receives from itself, paired inside the open group
//! as NCCL pairs them, so that the two agree on their length before either is issued.
//!
//! NCCL pairs a group's sends to this rank itself with its receives from itself in
//! issue order, per communicator, and copies each send into its receive with the
//! send's length, whatever the receive's is: a send longer than its receive would write
//! past the receive buffer. Both halves are this thread's own calls inside one group
//! (outside a group a send to itself is refused), so they are compared here, before
//! the second of a pair reaches NCCL. A refused half never reaches NCCL, so the queues
//! below stay the ones NCCL keeps; the half left without its partner is NCCL's
//! `ncclInvalidUsage` at the group's end, as any unpaired one is.

use std::cell::RefCell;
use std::collections::VecDeque;

use crate::error::{Error, LengthMismatch, Result};

/// Which half of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    Send,
    Recv,
}

/// The halves of one communicator's pairs issued in the open group and not yet paired:
/// their lengths in bytes, oldest first. Only one of the two queues is non-empty.
struct Unpaired {
    comm: usize,
    sends: VecDeque<usize>,
    recvs: VecDeque<usize>,
}

thread_local! {
    /// The open group's unpaired halves, per communicator (NCCL's groups are per thread).
    static UNPAIRED: RefCell<Vec<Unpaired>> = const { RefCell::new(Vec::new()) };
}

/// The entries [`clear`] keeps, emptied, for the next groups: their queues keep their
/// capacity, so a group's sends to itself allocate nothing after the first such group
/// (an `all_to_all` makes one every call).
const ENTRIES_KEPT: usize = 8;

/// Forgets every unpaired half: called when a group opens and when it ends (NCCL
/// forgets them then too).
pub(crate) fn clear() {
    UNPAIRED.with(|u| {
        let mut all = u.borrow_mut();
        all.truncate(ENTRIES_KEPT);
        for unpaired in all.iter_mut() {
            unpaired.sends.clear();
            unpaired.recvs.clear();
        }
    });
}

/// Records `half`, of `bytes` bytes, on the communicator identified by `comm`, inside
/// the open group: `Ok` when it pairs with an earlier opposite half of the same length
/// or waits for its partner; [`Error::LengthMismatch`] when its partner's length
/// differs, in which case it must not be issued (and it is not recorded). Out of line
/// (only grouped sends and receives to this rank itself take it), not `#[cold]`: every
/// `all_to_all` does.
#[inline(never)]
pub(crate) fn pair(comm: usize, half: Half, bytes: usize) -> Result<()> {
    UNPAIRED.with(|u| {
        let mut all = u.borrow_mut();
        // This communicator's entry, else an empty one (an entry with nothing unpaired
        // holds nothing of its communicator), else a new one.
        let found = all.iter().position(|p| p.comm == comm).or_else(|| {
            let empty = all
                .iter()
                .position(|p| p.sends.is_empty() && p.recvs.is_empty())?;
            all[empty].comm = comm;
            Some(empty)
        });
        let index = match found {
            Some(i) => i,
            None => {
                all.push(Unpaired {
                    comm,
                    sends: VecDeque::new(),
                    recvs: VecDeque::new(),
                });
                all.len() - 1
            }
        };
        let unpaired = &mut all[index];
        let (mine, theirs) = match half {
            Half::Send => (&mut unpaired.sends, &mut unpaired.recvs),
            Half::Recv => (&mut unpaired.recvs, &mut unpaired.sends),
        };
        match theirs.front() {
            None => {
                mine.push_back(bytes);
                Ok(())
            }
            Some(&partner) if partner == bytes => {
                theirs.pop_front();
                Ok(())
            }
            Some(&partner) => {
                let (source_len, destination_len) = match half {
                    Half::Send => (bytes, partner),
                    Half::Recv => (partner, bytes),
                };
                Err(Error::from(LengthMismatch {
                    what: "a send from this rank to itself and the receive NCCL pairs it with \
                           (lengths in bytes)",
                    source_len,
                    destination_len,
                }))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{clear, pair, Half};
    use crate::Error;

    #[test]
    fn halves_pair_in_order_per_communicator() {
        clear();
        pair(1, Half::Send, 16).unwrap();
        pair(1, Half::Send, 32).unwrap();
        pair(2, Half::Recv, 8).unwrap();
        pair(1, Half::Recv, 16).unwrap();
        pair(1, Half::Recv, 32).unwrap();
        pair(2, Half::Send, 8).unwrap();
        // Every pair is complete: a new receive waits for its send.
        pair(1, Half::Recv, 4).unwrap();
        pair(1, Half::Send, 4).unwrap();
        clear();
    }

    /// An entry whose pairs are all complete is reused by another communicator, and
    /// the halves of the two never meet; the entries outlive a group's end emptied.
    #[test]
    fn an_emptied_entry_serves_another_communicator_alone() {
        clear();
        pair(1, Half::Send, 16).unwrap();
        pair(1, Half::Recv, 16).unwrap();
        // Communicator 1 has nothing unpaired: its entry goes to communicator 2.
        pair(2, Half::Recv, 8).unwrap();
        // Communicator 1's send does not meet 2's receive (which it would refuse).
        pair(1, Half::Send, 32).unwrap();
        pair(2, Half::Send, 8).unwrap();
        assert!(pair(1, Half::Recv, 8).is_err(), "1's send of 32 waits");
        pair(1, Half::Recv, 32).unwrap();
        pair(3, Half::Send, 4).unwrap();
        clear();
        // Emptied by the end: a receive of another length starts a new pair.
        pair(3, Half::Recv, 64).unwrap();
        pair(3, Half::Send, 64).unwrap();
        clear();
    }

    #[test]
    fn a_half_of_another_length_is_refused_and_not_recorded() {
        clear();
        pair(7, Half::Recv, 64).unwrap();
        let longer = pair(7, Half::Send, 128).unwrap_err();
        assert!(matches!(longer, Error::LengthMismatch(..)), "{longer:?}");
        assert!(longer.to_string().contains("128"), "{longer}");
        // The refused send was not recorded: the receive still waits, and pairs with a
        // send of its length.
        pair(7, Half::Send, 64).unwrap();
        pair(7, Half::Send, 64).unwrap();
        assert!(pair(7, Half::Recv, 32).is_err());
        clear();
        // After the group's end nothing waits: a receive starts a new pair.
        pair(7, Half::Recv, 32).unwrap();
        clear();
    }
}
