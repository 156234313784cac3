//! The collectives as methods of [`Scope`]: enqueued on the scope's stream now, with
//! borrows for the call, like [`Scope::copy_device`] (see the module docs of
//! [`nccl`](super) for why that suffices).

use super::request::{issue, rank_in, read, write, Operands, Request};
use super::{Communicator, NcclElement, ReduceOp};
use crate::driver::nccl::Collective;
use crate::error::Result;
use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut};
use crate::scope::Scope;
use crate::sealed::TOKEN;

/// The requests, built from typed views; shared by [`Scope`]'s methods and
/// [`Group`](super::Group)'s. A root or peer that does not fit NCCL's `int` is out of
/// every communicator (checked again against the size in `issue`); a reduction is
/// resolved for the communicator it runs on (a `PreMulSum` of another is an `Err`).
impl<'a, 's, T: NcclElement> Request<'a, 's, T> {
    pub(crate) fn all_reduce<O: ReduceOp<T>>(
        operands: Operands<'a, 's, T>,
        op: O,
        comm: &Communicator,
    ) -> Result<Self> {
        let reduction = op.reduction(comm, TOKEN)?;
        Ok(Request::new(
            "all_reduce",
            Collective::AllReduce(reduction),
            operands,
        ))
    }

    /// [`all_reduce`](Self::all_reduce) by each rank's elements times its `factor`, on
    /// the GPU ([`Request::scaled`]).
    pub(crate) fn all_reduce_scaled(
        operands: Operands<'a, 's, T>,
        factor: DeviceSlice<'a, 's, T>,
        comm: &'a Communicator,
    ) -> Result<Self> {
        Request::scaled("all_reduce", operands, factor, comm, Collective::AllReduce)
    }

    pub(crate) fn broadcast(operands: Operands<'a, 's, T>, root: usize) -> Result<Self> {
        let root = rank_in(root, i32::MAX as usize)?;
        Ok(Request::new(
            "broadcast",
            Collective::Broadcast { root },
            operands,
        ))
    }

    pub(crate) fn reduce<O: ReduceOp<T>>(
        operands: Operands<'a, 's, T>,
        op: O,
        root: usize,
        comm: &Communicator,
    ) -> Result<Self> {
        let root = rank_in(root, i32::MAX as usize)?;
        let reduction = op.reduction(comm, TOKEN)?;
        Ok(Request::new(
            "reduce",
            Collective::Reduce(reduction, root),
            operands,
        ))
    }

    /// [`reduce`](Self::reduce) by each rank's elements times its `factor`, on the GPU.
    pub(crate) fn reduce_scaled(
        operands: Operands<'a, 's, T>,
        factor: DeviceSlice<'a, 's, T>,
        root: usize,
        comm: &'a Communicator,
    ) -> Result<Self> {
        let root = rank_in(root, i32::MAX as usize)?;
        Request::scaled("reduce", operands, factor, comm, |reduction| {
            Collective::Reduce(reduction, root)
        })
    }

    pub(crate) fn all_gather(operands: Operands<'a, 's, T>) -> Self {
        Request::new("all_gather", Collective::AllGather, operands)
    }

    pub(crate) fn reduce_scatter<O: ReduceOp<T>>(
        operands: Operands<'a, 's, T>,
        op: O,
        comm: &Communicator,
    ) -> Result<Self> {
        let reduction = op.reduction(comm, TOKEN)?;
        Ok(Request::new(
            "reduce_scatter",
            Collective::ReduceScatter(reduction),
            operands,
        ))
    }

    /// [`reduce_scatter`](Self::reduce_scatter) by each rank's elements times its
    /// `factor`, on the GPU.
    pub(crate) fn reduce_scatter_scaled(
        operands: Operands<'a, 's, T>,
        factor: DeviceSlice<'a, 's, T>,
        comm: &'a Communicator,
    ) -> Result<Self> {
        let what = "reduce_scatter";
        Request::scaled(what, operands, factor, comm, Collective::ReduceScatter)
    }

    pub(crate) fn send(buf: DeviceSlice<'a, 's, T>, peer: usize) -> Result<Self> {
        let peer = rank_in(peer, i32::MAX as usize)?;
        Ok(Request::new(
            "send",
            Collective::Send { peer },
            Operands::Read(buf),
        ))
    }

    pub(crate) fn recv(buf: DeviceSliceMut<'a, 's, T>, peer: usize) -> Result<Self> {
        let peer = rank_in(peer, i32::MAX as usize)?;
        Ok(Request::new(
            "recv",
            Collective::Recv { peer },
            Operands::Write(buf),
        ))
    }
}

/// The collective methods, written once for the two places that issue them: [`Scope`]
/// (enqueued now, `issue_now`) and [`Capture`](crate::Capture) (recorded into the graph,
/// `nccl/captured.rs`). `$issue(self, comm, request)` issues one request; the
/// communicator is borrowed for `$comm` (a scope's for the scope, so that no other
/// thread can be enqueuing on it when the scope's end aborts it; a capture's for the
/// call, since the graph keeps it); the attributes given go on `all_reduce` (its
/// example). Each method is `#[inline]`: a caller's loop of collectives then folds the
/// checks to the one path of its operation (without the hint LLVM kept
/// `all_reduce_in_place` out of line once the checks had grown: on 2x H200 one 4-byte
/// all_reduce's enqueue cost 1.036x-1.065x of the raw `ncclAllReduce`, 1.026x-1.035x
/// with it; `benchmarks/results/2026-11-27-h200x2-nccl-enqueue-inline-ab.txt`).
macro_rules! collective_methods {
    ($issue:ident, &$($comm:lifetime)?, $(#[$all_reduce_doc:meta])*) => {
        /// Every rank's `send` reduced by `op` into every rank's `recv` (`ncclAllReduce`).
        $(#[$all_reduce_doc])*
        #[inline]
        pub fn all_reduce<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
        ) -> Result<()> {
            let request = Request::all_reduce(Operands::Apart(read(send), write(recv)), op, comm)?;
            $issue(self, comm, request)
        }

        /// [`all_reduce`](Self::all_reduce) with `buf` both the input and the result.
        #[inline]
        pub fn all_reduce_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
        ) -> Result<()> {
            $issue(self, comm, Request::all_reduce(Operands::InPlace(write(buf)), op, comm)?)
        }

        /// Rank `root`'s `send` into every rank's `recv` (`ncclBroadcast`; `send` is read
        /// on the root only, but every rank passes one of the same length).
        #[inline]
        pub fn broadcast<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            root: usize,
        ) -> Result<()> {
            let request = Request::broadcast(Operands::Apart(read(send), write(recv)), root)?;
            $issue(self, comm, request)
        }

        /// Rank `root`'s `buf` into every rank's `buf`.
        #[inline]
        pub fn broadcast_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            root: usize,
        ) -> Result<()> {
            $issue(self, comm, Request::broadcast(Operands::InPlace(write(buf)), root)?)
        }

        /// Every rank's `send` reduced by `op` into rank `root`'s `recv` (`ncclReduce`).
        /// NCCL requires `recv` only on the root: on the other ranks it is borrowed all
        /// the same, and its contents afterwards are unspecified (valid numbers, every bit
        /// pattern of an [`NcclElement`] being one).
        #[inline]
        pub fn reduce<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
            root: usize,
        ) -> Result<()> {
            let request = Request::reduce(Operands::Apart(read(send), write(recv)), op, root, comm)?;
            $issue(self, comm, request)
        }

        /// [`reduce`](Self::reduce) into the root's `buf` (on the other ranks, `buf`'s
        /// contents afterwards are unspecified, as for `reduce`'s `recv`).
        #[inline]
        pub fn reduce_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
            root: usize,
        ) -> Result<()> {
            $issue(self, comm, Request::reduce(Operands::InPlace(write(buf)), op, root, comm)?)
        }

        /// Every rank's `send`, in rank order, into every rank's `recv`, which holds
        /// `comm.size()` times as many elements (`ncclAllGather`).
        #[inline]
        pub fn all_gather<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
        ) -> Result<()> {
            $issue(self, comm, Request::all_gather(Operands::Apart(read(send), write(recv))))
        }

        /// [`all_gather`](Self::all_gather) in `buf` (`comm.size()` blocks): this rank's
        /// block, number `comm.rank()`, is its input.
        #[inline]
        pub fn all_gather_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
        ) -> Result<()> {
            $issue(self, comm, Request::all_gather(Operands::InPlace(write(buf))))
        }

        /// The reduction by `op` of every rank's `send` (`comm.size()` blocks of
        /// `recv.len()`), block `r` of it into rank `r`'s `recv` (`ncclReduceScatter`).
        #[inline]
        pub fn reduce_scatter<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
        ) -> Result<()> {
            let request = Request::reduce_scatter(Operands::Apart(read(send), write(recv)), op, comm)?;
            $issue(self, comm, request)
        }

        /// [`reduce_scatter`](Self::reduce_scatter) in `buf` (`comm.size()` blocks): the
        /// result lands in this rank's block, number `comm.rank()`.
        #[inline]
        pub fn reduce_scatter_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            op: impl ReduceOp<T>,
        ) -> Result<()> {
            $issue(self, comm, Request::reduce_scatter(Operands::InPlace(write(buf)), op, comm)?)
        }

        /// [`all_reduce`](Self::all_reduce) of each rank's `send` times its own `factor`, one
        /// element of device memory that the GPU reads when the collective runs (a
        /// [`PreMulSum`](crate::nccl::PreMulSum) whose factor stays on the GPU: NCCL's
        /// `ncclScalarDevice`): `recv = Σ_r factor_r × send_r`, with the factor computed by
        /// earlier work on the stream, such as `1 / total_tokens` after an all-reduce of the
        /// token counts, and no host wait for it. `factor` is borrowed as `send` is.
        /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) unless it is one element;
        /// [`Error::Library`](crate::Error::Library) with an NCCL older than 2.11.
        #[inline]
        pub fn all_reduce_scaled<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
        ) -> Result<()> {
            let operands = Operands::Apart(read(send), write(recv));
            $issue(self, comm, Request::all_reduce_scaled(operands, read(factor), comm)?)
        }

        /// [`all_reduce_scaled`](Self::all_reduce_scaled) with `buf` both the input and
        /// the result.
        #[inline]
        pub fn all_reduce_scaled_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
        ) -> Result<()> {
            let operands = Operands::InPlace(write(buf));
            $issue(self, comm, Request::all_reduce_scaled(operands, read(factor), comm)?)
        }

        /// [`reduce`](Self::reduce) of each rank's `send` times its own `factor`, read on
        /// the GPU as in [`all_reduce_scaled`](Self::all_reduce_scaled), into the root's
        /// `recv`.
        #[inline]
        pub fn reduce_scaled<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
            root: usize,
        ) -> Result<()> {
            let operands = Operands::Apart(read(send), write(recv));
            $issue(self, comm, Request::reduce_scaled(operands, read(factor), root, comm)?)
        }

        /// [`reduce_scaled`](Self::reduce_scaled) into the root's `buf`, as
        /// [`reduce_in_place`](Self::reduce_in_place).
        #[inline]
        pub fn reduce_scaled_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
            root: usize,
        ) -> Result<()> {
            let operands = Operands::InPlace(write(buf));
            $issue(self, comm, Request::reduce_scaled(operands, read(factor), root, comm)?)
        }

        /// [`reduce_scatter`](Self::reduce_scatter) of each rank's `send` times its own
        /// `factor`, read on the GPU as in [`all_reduce_scaled`](Self::all_reduce_scaled).
        #[inline]
        pub fn reduce_scatter_scaled<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            send: &impl DeviceMemory<'s, T>,
            recv: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
        ) -> Result<()> {
            let operands = Operands::Apart(read(send), write(recv));
            $issue(self, comm, Request::reduce_scatter_scaled(operands, read(factor), comm)?)
        }

        /// [`reduce_scatter_scaled`](Self::reduce_scatter_scaled) in `buf`, as
        /// [`reduce_scatter_in_place`](Self::reduce_scatter_in_place).
        #[inline]
        pub fn reduce_scatter_scaled_in_place<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            factor: &impl DeviceMemory<'s, T>,
        ) -> Result<()> {
            let operands = Operands::InPlace(write(buf));
            $issue(self, comm, Request::reduce_scatter_scaled(operands, read(factor), comm)?)
        }

        /// `buf` to rank `peer`, which receives it with [`recv`](Self::recv) (`ncclSend`).
        /// A send to this rank itself needs its receive in the same
        /// [`nccl::group`](fn@crate::nccl::group).
        #[inline]
        pub fn send<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &impl DeviceMemory<'s, T>,
            peer: usize,
        ) -> Result<()> {
            $issue(self, comm, Request::send(read(buf), peer)?)
        }

        /// `buf` from rank `peer`'s [`send`](Self::send) of as many elements (`ncclRecv`).
        #[inline]
        pub fn recv<T: NcclElement>(
            &'s self,
            comm: &$($comm)? Communicator,
            buf: &mut impl DeviceMemoryMut<'s, T>,
            peer: usize,
        ) -> Result<()> {
            $issue(self, comm, Request::recv(write(buf), peer)?)
        }
    };
}
pub(crate) use collective_methods;

/// Collectives (NCCL) on the scope's stream, through a [`Communicator`] of the scope's
/// device. Every rank of the communicator makes the matching call with the same
/// lengths. Checked before anything is enqueued: the communicator's device is the
/// scope's ([`Error::DeviceMismatch`](crate::Error::DeviceMismatch)), it is usable
/// ([`Error::CommunicatorAborted`](crate::Error::CommunicatorAborted) or its failure),
/// roots and peers are ranks of it ([`Error::InvalidRank`](crate::Error::InvalidRank)),
/// lengths agree ([`Error::LengthMismatch`](crate::Error::LengthMismatch),
/// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch)), and no
/// [`nccl::group`](fn@super::group) is open on this thread
/// ([`Error::NcclGroup`](crate::Error::NcclGroup): use the group's methods there). An
/// operation on zero elements enqueues nothing.
impl<'s, 'env> Scope<'s, 'env> {
    collective_methods!(
        issue_now,
        &'s,
        ///
        /// ```no_run
        /// use stream_core::{nccl::{Communicator, Sum}, scope, Device, Error};
        /// # fn main() -> stream_core::Result<()> {
        /// let dev = Device::new(0)?;
        /// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
        /// let stream = dev.new_stream()?;
        /// let mut out = vec![0f32; 4];
        /// scope(&stream, |s| {
        ///     let grad = s.upload(&[1.0f32, 2.0, 3.0, 4.0])?;
        ///     let mut sum = s.alloc::<f32>(4)?;
        ///     s.all_reduce(&comm, &grad, &mut sum, Sum)?;
        ///     s.copy_to_host(&sum, &mut out)?.wait()?;
        ///     Ok::<_, Error>(())
        /// })?;
        /// assert_eq!(out, [1.0, 2.0, 3.0, 4.0]); // one rank: the sum is the input
        /// # Ok(()) }
        /// ```
    );
}

/// [`issue`] outside a group: a scope's own collective.
#[inline(always)]
fn issue_now<'a, 's: 'a, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &'s Communicator,
    request: Request<'a, 's, T>,
) -> Result<()> {
    issue(s, comm, request, None)
}
