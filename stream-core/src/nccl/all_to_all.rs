//! All-to-all: every rank sends block `r` of its buffer to rank `r` and receives rank
//! `r`'s block into block `r` of its own (PyTorch's `all_to_all_single` with equal
//! splits, the exchange of expert parallelism). NCCL has no call for it before 2.28 and
//! its guide writes it as one [`group`] of sends and receives, one pair per rank; so
//! does this file, through [`Group`]'s [`send`](Group::send) and [`recv`](Group::recv),
//! whose checks and borrows it inherits (no `unsafe` of its own).

use super::group::{self, Group};
use super::request::{issue, read, refuse_outside_a_group, write, Request};
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
    /// Issued as one NCCL group of a send and a receive per rank (NCCL's own recipe),
    /// so it is refused, as every scope collective, while an [`nccl::group`](super::group)
    /// is open on this thread: call [`Group::all_to_all`] there. Errors before anything
    /// is enqueued: [`Error::LengthMismatch`] when the lengths differ,
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
        comm: &Communicator,
        send: &impl DeviceMemory<'s, T>,
        recv: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        if group::is_open() || comm.grouped_only() {
            return Err(refuse_outside_a_group());
        }
        let bytes = (send.raw(TOKEN).len * size_of::<T>()) as u64;
        self.traced("all_to_all", Category::Collective, Some(bytes), || {
            // The group ends (NCCL enqueues the pairs) before this call returns, so the
            // borrows of `send` and `recv` outlive it, as `group`'s contract asks.
            group::group(|g| g.all_to_all(self, comm, send, recv))
        })
    }
}

impl<'g> Group<'g, '_> {
    /// [`Scope::all_to_all`], issued at the group's end (one send and one receive per
    /// rank of `comm`). In one group with the other devices' calls, this is how one
    /// thread drives an all-to-all over the communicators of
    /// [`Communicator::for_devices`].
    pub fn all_to_all<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let (send, recv) = (read(send), write(recv));
        let size = comm.size();
        let block = block_len(send.len(), recv.len(), size)?;
        if block == 0 {
            return Ok(());
        }
        // Every block is in range (checked above), so the pairs below fail only where
        // every one of them would (the communicator, the device): on the first one,
        // before anything was issued, or in NCCL itself.
        let (mut to_send, mut to_recv) = (send, recv);
        for peer in 0..size {
            let (out, rest) = split_off(to_send, block)?;
            let (into, rest_mut) = split_off_mut(to_recv, block)?;
            issue(s, comm, Request::send(out, peer)?, Some(self))?;
            issue(s, comm, Request::recv(into, peer)?, Some(self))?;
            (to_send, to_recv) = (rest, rest_mut);
        }
        Ok(())
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

/// The first `n` elements of `slice`, and the rest.
fn split_off<'a, 's, T: NcclElement>(
    slice: DeviceSlice<'a, 's, T>,
    n: usize,
) -> Result<(DeviceSlice<'a, 's, T>, DeviceSlice<'a, 's, T>)> {
    slice.split_at(n)
}

/// The first `n` elements of `slice`, and the rest, both writable.
fn split_off_mut<'a, 's, T: NcclElement>(
    slice: DeviceSliceMut<'a, 's, T>,
    n: usize,
) -> Result<(DeviceSliceMut<'a, 's, T>, DeviceSliceMut<'a, 's, T>)> {
    slice.into_split_at_mut(n)
}

#[cfg(test)]
mod tests {
    use super::block_len;
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
}
