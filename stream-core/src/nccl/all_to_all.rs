//! All-to-all: every rank sends block `r` of its buffer to rank `r` and receives rank
//! `r`'s block into block `r` of its own (PyTorch's `all_to_all_single`, the exchange
//! of expert parallelism), with blocks of equal length or of lengths given per rank
//! (`all_to_all_v`). NCCL has no call for it before 2.28 and its guide writes it as one
//! [`group`](fn@super::group) of sends and receives, one pair per rank; so does this file,
//! through the requests of [`Group::send`] and [`Group::recv`], whose checks and
//! borrows it inherits (no `unsafe` of its own).

use super::group::{self, Group};
use super::group_target::GroupTarget;
use super::request::{read, refuse_own_collective, write, Request};
use super::{Communicator, NcclElement};
use crate::error::{Error, Result, ShapeMismatch};
use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut};
use crate::scope::Scope;
use crate::sealed::TOKEN;
use crate::trace::Category;

impl<'s, 'env> Scope<'s, 'env> {
    /// Block `r` of `send` to rank `r`, and rank `r`'s block into block `r` of `recv`,
    /// for every rank `r` (this rank's own block is copied across). `send` and `recv`
    /// hold `comm.size()` blocks of equal length, as on every other rank; the two are
    /// distinct buffers (one is borrowed shared, the other exclusively).
    ///
    /// Issued as one NCCL group of a send and a receive per rank (NCCL's own recipe), so it
    /// is refused, as every scope collective, while an [`nccl::group`](fn@super::group) is
    /// open on this thread: call [`Group::all_to_all`] there. Errors before anything is
    /// enqueued: [`Error::LengthMismatch`] when the lengths differ,
    /// [`Error::ShapeMismatch`] when they are not a multiple of `comm.size()`, and the
    /// checks of [`all_reduce`](Self::all_reduce).
    ///
    /// ```no_run
    /// use stream_core::{nccl::Communicator, scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
    /// let stream = dev.new_stream()?;
    /// let mut out = vec![0u32; 4];
    /// scope(&stream, |s| {
    ///     let tokens = s.upload(&[1u32, 2, 3, 4])?; // comm.size() blocks
    ///     let mut routed = s.alloc::<u32>(4)?;
    ///     s.all_to_all(&comm, &tokens, &mut routed)?;
    ///     s.copy_to_host(&routed, &mut out)?.wait()?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!(out, [1, 2, 3, 4]); // one rank: its one block comes back to it
    /// # Ok(()) }
    /// ```
    pub fn all_to_all<T: NcclElement>(
        &'s self,
        comm: &'s Communicator,
        send: &impl DeviceMemory<'s, T>,
        recv: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let bytes = (send.raw(TOKEN).len * size_of::<T>()) as u64;
        self.in_own_group("all_to_all", comm, bytes, |g| {
            g.all_to_all(self, comm, send, recv)
        })
    }

    /// [`all_to_all`](Self::all_to_all) with blocks of given lengths: the first
    /// `send_counts[0]` elements of `send` to rank 0, the next `send_counts[1]` to rank
    /// 1, and so on; rank `r`'s block into `recv` at the offset of `recv_counts[r]`
    /// likewise (PyTorch's `all_to_all_single` with split sizes: the tokens routed to
    /// each expert). `send_counts[r]` here must equal rank `r`'s `recv_counts` entry for
    /// this rank, as every rank's lengths must agree in every collective; a block of
    /// zero is neither sent nor received.
    ///
    /// Errors before anything is enqueued: [`Error::ShapeMismatch`] when a list does not
    /// hold one count per rank or its sum is not its buffer's length,
    /// [`Error::LengthMismatch`] when this rank's counts for itself differ
    /// (`send_counts[rank] != recv_counts[rank]`), and the checks of
    /// [`all_reduce`](Self::all_reduce).
    pub fn all_to_all_v<T: NcclElement>(
        &'s self,
        comm: &'s Communicator,
        send: &impl DeviceMemory<'s, T>,
        send_counts: &[usize],
        recv: &mut impl DeviceMemoryMut<'s, T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        let bytes = (send.raw(TOKEN).len * size_of::<T>()) as u64;
        self.in_own_group("all_to_all_v", comm, bytes, |g| {
            g.all_to_all_v(self, comm, send, send_counts, recv, recv_counts)
        })
    }

    /// Runs `issue` in an NCCL group of its own (whose operations borrow for `'held`),
    /// traced as `what` moving `bytes`; refused as a scope's own collective is, inside a
    /// group or on a communicator one thread drives beside others.
    pub(super) fn in_own_group<'held>(
        &'s self,
        what: &'static str,
        comm: &'s Communicator,
        bytes: u64,
        issue: impl for<'g> FnOnce(&'g Group<'g, 'held>) -> Result<()>,
    ) -> Result<()> {
        refuse_own_collective(comm)?;
        // The group ends (NCCL enqueues the pairs) before this call returns, so the
        // borrows `issue` holds outlive it, as `group`'s contract asks.
        self.traced(what, Category::Collective, Some(bytes), || {
            group::group(issue)
        })
    }
}

impl<'g> Group<'g, '_> {
    /// [`Scope::all_to_all`], issued at the group's end (one send and one receive per
    /// rank of `comm`). In one group with the other devices' calls, this is how one
    /// thread drives an all-to-all over the communicators of
    /// [`Communicator::for_devices`].
    pub fn all_to_all<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let (send, recv) = (read(send), write(recv));
        let block = block_len(send.len(), recv.len(), comm.size())?;
        self.exchange(s, comm, send, recv, |_| (block, block))
    }

    /// [`Scope::all_to_all_v`], issued at the group's end.
    pub fn all_to_all_v<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        send_counts: &[usize],
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        recv_counts: &[usize],
    ) -> Result<()> {
        let (send, recv) = (read(send), write(recv));
        let size = comm.size();
        check_counts(send_counts, send.len(), size, SEND_COUNTS)?;
        check_counts(recv_counts, recv.len(), size, RECV_COUNTS)?;
        // This rank's own block is a send to itself, which NCCL copies with the send's
        // length: the two counts must agree (the other ranks' are out of sight).
        let me = comm.rank();
        Error::check_lengths(OWN_BLOCK, send_counts[me], recv_counts[me])?;
        self.exchange(s, comm, send, recv, |peer| {
            (send_counts[peer], recv_counts[peer])
        })
    }

    /// One send and one receive per rank `peer` of `comm`, of `counts(peer)` elements,
    /// from consecutive blocks of `send` and into consecutive blocks of `recv`, whose
    /// lengths the caller checked to be the sums of the counts.
    pub(super) fn exchange<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: DeviceSlice<'g, 's, T>,
        recv: DeviceSliceMut<'g, 's, T>,
        counts: impl Fn(usize) -> (usize, usize),
    ) -> Result<()> {
        // Every block is in range (checked by the caller), so the pairs below fail only
        // where every one of them would (the communicator, the device): on the first
        // one, before anything was issued, or in NCCL itself. A pair of zero elements
        // issues nothing (as `issue` skips every empty operation).
        //
        // A pair refused because another rank of this process disagrees (`ledger.rs`)
        // does not stop the exchange: every later pair is issued or stood in for, so
        // that no call of that rank is left without a partner inside NCCL.
        let (mut to_send, mut to_recv) = (send, recv);
        let mut first_error = None;
        for peer in 0..comm.size() {
            let (out_len, in_len) = counts(peer);
            let (out, rest) = to_send.split_at(out_len)?;
            let (into, rest_mut) = to_recv.into_split_at_mut(in_len)?;
            for issued in [
                s.issue_in_group(TOKEN, comm, Request::send(out, peer)?, self),
                s.issue_in_group(TOKEN, comm, Request::recv(into, peer)?, self),
            ] {
                match issued {
                    Ok(()) => {}
                    Err(e @ Error::RanksDisagree(_)) => drop(first_error.get_or_insert(e)),
                    Err(e) => return Err(first_error.unwrap_or(e)),
                }
            }
            (to_send, to_recv) = (rest, rest_mut);
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The length of each of the `size` blocks of an all-to-all's buffers of `send` and
/// `recv` elements, or why there is none.
fn block_len(send: usize, recv: usize, size: usize) -> Result<usize> {
    Error::check_lengths("all_to_all", send, recv)?;
    if !send.is_multiple_of(size) {
        return Err(Error::from(ShapeMismatch {
            what: "all_to_all: the buffers (a multiple of the communicator size)",
            expected: send - send % size,
            actual: send,
        }));
    }
    Ok(send / size)
}

/// How `all_to_all_v` names this rank's block to itself.
const OWN_BLOCK: &str = "all_to_all_v: the block this rank sends itself (send_counts[rank]) and \
                         the one it receives from itself (recv_counts[rank])";

/// How [`check_counts`] names a list of counts and the buffer it splits.
struct Counts {
    list: &'static str,
    buffer: &'static str,
}

const SEND_COUNTS: Counts = Counts {
    list: "all_to_all_v: send_counts, one count per rank",
    buffer: "all_to_all_v: the send buffer, the sum of send_counts",
};

const RECV_COUNTS: Counts = Counts {
    list: "all_to_all_v: recv_counts, one count per rank",
    buffer: "all_to_all_v: the receive buffer, the sum of recv_counts",
};

/// `Ok` when `counts` holds one count per rank of `size` and they add up to `len`, the
/// length of the buffer they split.
fn check_counts(counts: &[usize], len: usize, size: usize, names: Counts) -> Result<()> {
    let mismatch = |what, expected, actual| {
        Err(Error::from(ShapeMismatch {
            what,
            expected,
            actual,
        }))
    };
    if counts.len() != size {
        return mismatch(names.list, size, counts.len());
    }
    let sum = counts
        .iter()
        .try_fold(0usize, |sum, &c| sum.checked_add(c))
        .unwrap_or(usize::MAX);
    if sum != len {
        return mismatch(names.buffer, sum, len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{block_len, check_counts, RECV_COUNTS, SEND_COUNTS};
    use crate::Error;

    #[test]
    fn blocks_are_the_length_over_the_ranks() {
        assert_eq!(block_len(12, 12, 4).unwrap(), 3);
        assert_eq!(block_len(0, 0, 3).unwrap(), 0);
        assert_eq!(block_len(5, 5, 1).unwrap(), 5);
    }

    #[test]
    fn unequal_or_ragged_buffers_are_refused() {
        assert!(matches!(
            block_len(12, 8, 4),
            Err(Error::LengthMismatch { .. })
        ));
        let ragged = block_len(10, 10, 4).unwrap_err();
        assert!(matches!(ragged, Error::ShapeMismatch(..)), "{ragged:?}");
        assert!(ragged
            .to_string()
            .contains("multiple of the communicator size"));
    }

    #[test]
    fn counts_are_one_per_rank_and_add_up_to_the_buffer() {
        assert!(check_counts(&[3, 0, 5], 8, 3, SEND_COUNTS).is_ok());
        assert!(check_counts(&[], 0, 1, SEND_COUNTS).is_err());
        let short = check_counts(&[3, 5], 8, 3, SEND_COUNTS).unwrap_err();
        assert!(matches!(short, Error::ShapeMismatch(..)), "{short:?}");
        assert!(
            short
                .to_string()
                .contains("send_counts, one count per rank"),
            "{short}"
        );
        let sum = check_counts(&[3, 0, 4], 8, 3, RECV_COUNTS).unwrap_err();
        assert!(sum.to_string().contains("the sum of recv_counts"), "{sum}");
        assert!(check_counts(&[usize::MAX, 2], 1, 2, SEND_COUNTS).is_err());
    }
}
