//! [`PreMulSum`]: the sum of each rank's elements times a factor of its own
//! (`ncclRedOpCreatePreMulSum`), made once on a communicator and passed to its
//! reductions by reference.

use std::fmt;

use super::{Communicator, NcclElement, ReduceOp};
use crate::driver::nccl::Reduction;
use crate::driver::nccl_reduction::RawPreMulSum;
use crate::error::{Error, Result};
use crate::memory::value_bytes;
use crate::sealed;

/// A reduction that multiplies each rank's elements by the rank's own `factor`, on the
/// GPU, before summing them (NCCL's `ncclRedOpCreatePreMulSum`, PyTorch's
/// `ReduceOp.PREMUL_SUM`): `recv = Σ_r factor_r × send_r`. Made by
/// [`Communicator::pre_mul_sum`], for one element type, and passed by reference to
/// [`all_reduce`](crate::Scope::all_reduce), [`reduce`](crate::Scope::reduce) and
/// [`reduce_scatter`](crate::Scope::reduce_scatter) on that communicator (their
/// `_in_place` forms, a [`Group`](super::Group)'s and a capture's too).
///
/// Averaging gradients with another scale folded in, `1 / (ranks × loss_scale)`, or
/// weighting each rank by its share of the batch (`local_tokens / total_tokens`, a
/// factor of its own), costs no pass of its own. ([`Avg`](super::Avg) of floating-point
/// elements is this with `1 / ranks`: NCCL pre-multiplies those too, which keeps a
/// half-precision sum in range.) Each rank passes its own factor; every rank must
/// reduce with a `PreMulSum` where one does, as with any reduction (two ranks of this
/// process that do not are [`Error::RanksDisagree`]). A factor the GPU computes, and
/// the host never needs to see, is one element of device memory given to
/// [`Scope::all_reduce_scaled`](crate::Scope::all_reduce_scaled) and its kin instead:
/// it is read when the collective runs, and agrees with a `PreMulSum` on other ranks.
///
/// ```no_run
/// use stream_core::{nccl::Communicator, scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let device = Device::new(0)?;
/// let comm = &Communicator::for_devices(&[device.clone()])?[0];
/// let ranks = comm.size() as f32;
/// let mean = comm.pre_mul_sum(1.0 / ranks)?; // made once, used for every step
/// let stream = device.new_stream()?;
/// scope(&stream, |s| {
///     let mut grad = s.upload(&[2.0f32; 1024])?;
///     s.all_reduce_in_place(comm, &mut grad, &mean)?;
///     Ok::<_, Error>(())
/// })?;
/// # Ok(()) }
/// ```
///
/// It borrows the communicator and is destroyed when dropped (`ncclRedOpDestroy`;
/// NCCL copies it into each call, so dropping it right after a call, inside a group or
/// after a capture recorded it, is fine). Like the communicator, it stays on the thread
/// that holds it. Passed to a collective on another communicator it is
/// [`Error::ReductionOfAnotherCommunicator`], and nothing is enqueued.
///
/// ```compile_fail,E0277
/// # use stream_core::{nccl::Communicator, DeviceBuffer, Scope};
/// # fn f<'s>(s: &'s Scope<'s, '_>, comm: &Communicator, x: &mut DeviceBuffer<'s, f64>)
/// # -> stream_core::Result<()> {
/// let half = comm.pre_mul_sum(0.5f32)?;
/// s.all_reduce_in_place(comm, x, &half)?; // error: made for `f32`, not `f64`
/// # Ok(()) }
/// ```
pub struct PreMulSum<'c, T: NcclElement> {
    raw: RawPreMulSum<'c>,
    factor: T,
}

impl Communicator {
    /// A [`PreMulSum`] on this communicator: the reduction that sums each rank's
    /// elements times its own `factor`. [`Error::Library`] with an NCCL older than 2.11
    /// (which lacks it), [`Error::CommunicatorAborted`] on an aborted communicator.
    pub fn pre_mul_sum<T: NcclElement>(&self, factor: T) -> Result<PreMulSum<'_, T>> {
        // Every NCCL element type is at most 8 bytes (`NcclElement` is sealed): checked
        // when this is compiled for `T`, so the copy below cannot go past `bytes`.
        const { assert!(size_of::<T>() <= 8) };
        let mut bytes = [0u8; 8];
        let value = value_bytes(&factor);
        bytes[..value.len()].copy_from_slice(value);
        let raw = RawPreMulSum::new(self.raw(), T::DATA_TYPE, bytes)?;
        Ok(PreMulSum { raw, factor })
    }
}

impl<T: NcclElement> PreMulSum<'_, T> {
    /// This rank's factor.
    pub fn factor(&self) -> T {
        self.factor
    }
}

impl<T: NcclElement + fmt::Debug> fmt::Debug for PreMulSum<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreMulSum")
            .field("factor", &self.factor)
            .finish_non_exhaustive()
    }
}

impl<T: NcclElement> sealed::NcclOp for &PreMulSum<'_, T> {
    #[inline(always)]
    fn reduction(&self, comm: &Communicator, _: sealed::Token) -> Result<Reduction> {
        if self.raw.is_of(comm.raw()) {
            Ok(self.raw.reduction())
        } else {
            Err(Error::ReductionOfAnotherCommunicator)
        }
    }
}

impl<T: NcclElement> ReduceOp<T> for &PreMulSum<'_, T> {}
