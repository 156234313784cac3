//! Gather and scatter: every rank's `send` into block `r` of the root's `recv` (rank `r`
//! the sender), and block `r` of the root's `send` into rank `r`'s `recv` (PyTorch's
//! `gather` and `scatter`, NCCL 2.28's `ncclGather` and `ncclScatter`). Written, as
//! NCCL's guide writes them for earlier versions, as one [`group`](fn@super::group) of
//! sends and receives: the exchange of `all_to_all.rs` with every block that does not
//! involve the root of zero elements (which NCCL never sees), so they inherit its checks,
//! its borrows and its care for ranks of one process that disagree (no `unsafe` of their
//! own).

use super::group::Group;
use super::group_target::GroupTarget;
use super::request::{rank_in, read, write};
use super::{Communicator, NcclElement};
use crate::error::{Error, Result, ShapeMismatch};
use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut};
use crate::scope::Scope;
use crate::sealed::TOKEN;

impl<'s, 'env> Scope<'s, 'env> {
    /// Every rank's `send` into the root's `recv`, rank `r`'s at block `r`
    /// (`ncclGather`, PyTorch's `gather`): on rank `root`, `recv` holds `comm.size()`
    /// blocks of `send`'s length, as long as every rank's `send`; on the other ranks it
    /// is not used and may be empty.
    ///
    /// Issued as one NCCL group of sends and receives, so it is refused, as every scope
    /// collective, while an [`nccl::group`](fn@super::group) is open on this thread: call
    /// [`Group::gather`] there. Errors before anything is enqueued:
    /// [`Error::InvalidRank`] for a root outside the communicator,
    /// [`Error::ShapeMismatch`] when the root's `recv` is not `comm.size()` times
    /// `send`, and the checks of [`all_reduce`](Self::all_reduce).
    ///
    /// ```no_run
    /// use stream_core::{nccl::Communicator, scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
    /// let stream = dev.new_stream()?;
    /// let mut out = vec![0f32; 3];
    /// scope(&stream, |s| {
    ///     let mine = s.upload(&[1.0f32, 2.0, 3.0])?;
    ///     let mut all = s.alloc::<f32>(3 * comm.size())?; // only the root's is used
    ///     s.gather(&comm, &mine, &mut all, 0)?;
    ///     s.copy_to_host(&all, &mut out)?.wait()?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!(out, [1.0, 2.0, 3.0]); // one rank, the root: its own block
    /// # Ok(()) }
    /// ```
    pub fn gather<T: NcclElement>(
        &'s self,
        comm: &'s Communicator,
        send: &impl DeviceMemory<'s, T>,
        recv: &mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        let bytes = (send.raw(TOKEN).len * size_of::<T>()) as u64;
        self.in_own_group("gather", comm, bytes, |g| {
            g.gather(self, comm, send, recv, root)
        })
    }

    /// Block `r` of the root's `send` into rank `r`'s `recv` (`ncclScatter`, PyTorch's
    /// `scatter`): on rank `root`, `send` holds `comm.size()` blocks of `recv`'s length,
    /// as long as every rank's `recv`; on the other ranks it is not used and may be
    /// empty.
    ///
    /// Issued and refused as [`gather`](Self::gather) is ([`Group::scatter`] inside a
    /// group); [`Error::ShapeMismatch`] when the root's `send` is not `comm.size()` times
    /// `recv`.
    pub fn scatter<T: NcclElement>(
        &'s self,
        comm: &'s Communicator,
        send: &impl DeviceMemory<'s, T>,
        recv: &mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        let bytes = (recv.raw(TOKEN).len * size_of::<T>()) as u64;
        self.in_own_group("scatter", comm, bytes, |g| {
            g.scatter(self, comm, send, recv, root)
        })
    }
}

impl<'g> Group<'g, '_> {
    /// [`Scope::gather`], issued at the group's end.
    pub fn gather<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        self.with_root(s, comm, read(send), write(recv), root, Toward::Root)
    }

    /// [`Scope::scatter`], issued at the group's end.
    pub fn scatter<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        self.with_root(s, comm, read(send), write(recv), root, Toward::Ranks)
    }

    /// A gather (`Toward::Root`) or a scatter (`Toward::Ranks`): the exchange whose only
    /// non-empty blocks are the root's, one per rank, in the root's buffer (checked to
    /// hold `comm.size()` of them) and the other buffer of every rank; the root's buffer
    /// on the other ranks is not used (an empty front of it goes to the exchange).
    fn with_root<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: DeviceSlice<'g, 's, T>,
        recv: DeviceSliceMut<'g, 's, T>,
        root: usize,
        way: Toward,
    ) -> Result<()> {
        let (size, me) = (comm.size(), comm.rank());
        rank_in(root, size)?;
        let at_root = me == root;
        let (send, recv, block) = match way {
            Toward::Root => {
                let block = send.len();
                let recv = if at_root {
                    check_root_buffer(GATHER, block, size, recv.len())?;
                    recv
                } else {
                    recv.into_split_at_mut(0)?.0
                };
                (send, recv, block)
            }
            Toward::Ranks => {
                let block = recv.len();
                let send = if at_root {
                    check_root_buffer(SCATTER, block, size, send.len())?;
                    send
                } else {
                    send.split_at(0)?.0
                };
                (send, recv, block)
            }
        };
        // A gather sends to the root and, at the root, receives from every rank; a
        // scatter the other way round.
        self.exchange(s, comm, send, recv, |peer| {
            let with_the_root = if peer == root { block } else { 0 };
            let at_the_root = if at_root { block } else { 0 };
            match way {
                Toward::Root => (with_the_root, at_the_root),
                Toward::Ranks => (at_the_root, with_the_root),
            }
        })
    }
}

/// Which way [`Group::with_root`] moves the blocks.
#[derive(Clone, Copy)]
enum Toward {
    /// From every rank to the root (gather).
    Root,
    /// From the root to every rank (scatter).
    Ranks,
}

/// How [`check_root_buffer`] names the root's buffer.
const GATHER: &str = "gather: the root's receive buffer";
const SCATTER: &str = "scatter: the root's send buffer";

/// `Ok` when the root's buffer of `actual` elements holds `size` blocks of `block`.
fn check_root_buffer(what: &'static str, block: usize, size: usize, actual: usize) -> Result<()> {
    let expected = block.saturating_mul(size);
    if actual == expected {
        return Ok(());
    }
    Err(Error::from(ShapeMismatch {
        what,
        expected,
        actual,
    }))
}

#[cfg(test)]
mod tests {
    use super::check_root_buffer;
    use crate::Error;

    #[test]
    fn the_roots_buffer_holds_a_block_per_rank() {
        assert!(check_root_buffer("gather", 3, 4, 12).is_ok());
        assert!(check_root_buffer("gather", 0, 4, 0).is_ok());
        let short = check_root_buffer("gather: the root's receive buffer", 3, 4, 11).unwrap_err();
        assert!(matches!(short, Error::ShapeMismatch(..)), "{short:?}");
        assert!(
            short.to_string().contains("root's receive buffer"),
            "{short}"
        );
        assert!(check_root_buffer("scatter", usize::MAX, 2, 7).is_err());
    }
}
