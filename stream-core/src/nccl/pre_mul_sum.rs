//! [`PreMulSum`]: the sum of each rank's elements times a factor of its own
//! (`ncclRedOpCreatePreMulSum`), made once on a communicator and passed to its
//! reductions by reference.

use std::fmt;

use super::{Communicator, NcclElement, ReduceOp};
use crate::driver::nccl::Reduction;
use crate::driver::nccl_reduction::RawPreMulSum;
use crate::error::{Error, Result, ShapeMismatch};
use crate::memory::{value_bytes, DeviceSlice};
use crate::sealed::{self, Sealed, TOKEN};

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

/// The pre-multiplied sum of one call of [`Scope::all_reduce_scaled`](crate::Scope::all_reduce_scaled)
/// and its kin: made on the call's communicator with the factor in the scope's device
/// memory (`ncclScalarDevice`), given to that one collective, and destroyed when the
/// call returns (NCCL copied it into the call; the GPU reads the factor when the
/// collective runs).
pub(crate) struct DeviceFactor<'c> {
    raw: RawPreMulSum<'c>,
}

impl<'c> DeviceFactor<'c> {
    /// The reduction for one collective on `comm` whose factor is `factor`, one element.
    #[inline]
    pub(crate) fn new<T: NcclElement>(
        comm: &'c Communicator,
        factor: DeviceSlice<'_, '_, T>,
    ) -> Result<Self> {
        let factor = factor.raw(TOKEN);
        if factor.len != 1 {
            return Err(one_factor(factor.len));
        }
        // SAFETY: `factor` is one initialised `T` (checked above; device memory is
        // initialised when allocated and every bit pattern of a `T: NcclElement` is one),
        // device memory of the brand of the scope (or capture, or group target) that
        // issues the one collective this reduction is given to, so memory the scope's
        // device can read (its own, or lent to it by a fork, which granted access), valid
        // on that scope's stream; it is borrowed shared by that call's caller for as long
        // as the collective is being issued (a group's calls borrow it until the group's
        // end, when NCCL enqueues them), so nothing writes or frees it before the
        // collective is on the stream, and every later write or free of it is ordered
        // after the collective on the stream (or, in a capture, recorded after it in the
        // graph, whose memory keeps its address at every replay). This value is dropped
        // when the call returns, and never given to another collective.
        let raw = unsafe { RawPreMulSum::on_device(comm.raw(), T::DATA_TYPE, factor.ptr)? };
        Ok(DeviceFactor { raw })
    }

    /// The reduction, for the one collective of this value's call.
    #[inline]
    pub(crate) fn reduction(&self) -> Reduction {
        self.raw.reduction()
    }
}

/// [`Error::ShapeMismatch`] for a device factor of `len` elements.
#[cold]
fn one_factor(len: usize) -> Error {
    Error::from(ShapeMismatch {
        what: "the device factor (one element)",
        expected: 1,
        actual: len,
    })
}
