//! [`RawPreMulSum`]: a reduction made on one communicator (`ncclRedOpCreatePreMulSum`),
//! an RAII handle that destroys it (`ncclRedOpDestroy`); the handle NCCL hands out is
//! kept as C's `int` (`nccl_user_op.rs` says why).
//!
//! NCCL's rules (`nccl.h`, and `enqueue.cc`, which copies the operation into each call
//! "since the op handle may be destroyed before ncclGroupEnd()"): the handle is for
//! collectives on the communicator it was made on and of the element type it was made
//! for (NCCL checks both and returns an error otherwise); with
//! `ncclScalarHostImmediate` the factor is read before the create call returns, with
//! `ncclScalarDevice` it "is in device-visible memory and will be dereferenced while the
//! collective is running"; and the handle "may be destroyed as soon as the last NCCL
//! function which is given that operator returns", inside a group, or after a graph
//! captured it, too. So only a factor in device memory outlives a call: its reader's
//! proof ([`RawPreMulSum::on_device`]).

use std::ffi::{c_int, c_void};

use cudarc::nccl::sys;

use super::nccl::{check, require_version, DataType, DevicePtr, Reduction};
use super::nccl_comm::{enter, RawComm};
use super::nccl_user_op::{calls, UserReduction};
use crate::error::{Error, Library, Result};

/// The first NCCL with `ncclRedOpCreatePreMulSum` (2.11.4, as `ncclGetVersion` writes it).
const PRE_MUL_SUM_SINCE: i32 = 21104;

/// A pre-multiplied sum made on `comm`: each rank's elements times its own factor, then
/// summed. Destroyed when dropped (nothing more once the communicator was aborted: NCCL
/// freed it with the communicator). Borrows the communicator, so it is used and dropped
/// on the thread that holds it (`RawComm` is not `Sync`), as NCCL's calls on one
/// communicator must be.
pub(crate) struct RawPreMulSum<'c> {
    comm: &'c RawComm,
    reduction: UserReduction,
}

impl<'c> RawPreMulSum<'c> {
    /// A pre-multiplied sum of `data_type` elements on `comm`, whose factor is the value
    /// whose bytes begin `factor` (`ncclScalarHostImmediate`: NCCL copies the type's
    /// size, at most 8 bytes, before returning). `CommunicatorAborted` on an aborted
    /// communicator; [`Error::Library`] on an NCCL older than 2.11.
    pub(crate) fn new(comm: &'c RawComm, data_type: DataType, factor: [u8; 8]) -> Result<Self> {
        let mut factor = factor;
        // SAFETY: `factor` holds 8 bytes, and NCCL reads the element type's size of them
        // (at most 8: its largest types are 8 bytes) before returning, as
        // `ncclScalarHostImmediate` promises.
        unsafe {
            Self::create(
                comm,
                data_type,
                factor.as_mut_ptr().cast::<c_void>(),
                sys::ncclScalarResidence_t::ncclScalarHostImmediate,
            )
        }
    }

    /// A pre-multiplied sum of `data_type` elements on `comm`, whose factor NCCL reads
    /// from device memory at `factor` while each collective given it runs
    /// (`ncclScalarDevice`). Errors as [`new`](Self::new).
    ///
    /// # Safety
    ///
    /// `factor` is one initialised element of `data_type` in device memory that `comm`'s
    /// device can read, and it stays allocated, and written by no other work, until every
    /// collective given this reduction has completed.
    pub(crate) unsafe fn on_device(
        comm: &'c RawComm,
        data_type: DataType,
        factor: DevicePtr,
    ) -> Result<Self> {
        // SAFETY: NCCL keeps `factor` and reads it only while the collectives run, which
        // this function's contract covers.
        unsafe {
            Self::create(
                comm,
                data_type,
                factor as *mut c_void,
                sys::ncclScalarResidence_t::ncclScalarDevice,
            )
        }
    }

    /// `ncclRedOpCreatePreMulSum` with `factor` where `residence` says.
    ///
    /// # Safety
    ///
    /// `factor` is valid for NCCL to read as `residence` says it will (its callers'
    /// contracts).
    unsafe fn create(
        comm: &'c RawComm,
        data_type: DataType,
        factor: *mut c_void,
        residence: sys::ncclScalarResidence_t,
    ) -> Result<Self> {
        require_version("ncclRedOpCreatePreMulSum", PRE_MUL_SUM_SINCE)?;
        let calls = calls().ok_or_else(|| {
            Error::from(Library {
                call: "ncclRedOpCreatePreMulSum",
                message: "the NCCL loaded does not export ncclRedOpCreatePreMulSum, \
                          ncclRedOpDestroy and the reducing collectives"
                    .into(),
            })
        })?;
        let _call = enter(comm)?;
        let mut op: c_int = 0;
        // SAFETY: `comm` is a live communicator (inside its handshake: `_call`, so its
        // abort waits until after this call; only this thread calls NCCL with it:
        // `RawComm` is not `Sync`); `op` is a live `int` NCCL writes; `factor` is valid as `residence`
        // says (this function's contract).
        let status = unsafe {
            (calls.create_pre_mul_sum)(&raw mut op, factor, data_type, residence, comm.raw())
        };
        check(
            "ncclRedOpCreatePreMulSum",
            status.result(),
            Some(comm.raw()),
        )?;
        Ok(RawPreMulSum {
            comm,
            reduction: UserReduction::new(op, calls),
        })
    }

    /// The reduction, for collectives on the communicator it was made on.
    #[inline(always)]
    pub(crate) fn reduction(&self) -> Reduction {
        Reduction::PreMulSum(self.reduction)
    }

    /// `true` when it was made on `comm`.
    #[inline(always)]
    pub(crate) fn is_of(&self, comm: &RawComm) -> bool {
        std::ptr::eq(self.comm, comm)
    }
}

impl Drop for RawPreMulSum<'_> {
    fn drop(&mut self) {
        let Ok(_call) = enter(self.comm) else {
            return;
        };
        let (op, calls) = self.reduction.parts();
        // SAFETY: `op` was made on `self.comm`, which is live (borrowed, and inside its
        // handshake: `_call`, so its abort waits until after this call), and is destroyed
        // once, here. Every NCCL call given it has returned (each is a call of this
        // thread, which is running this drop), which is all NCCL requires.
        let status = unsafe { (calls.destroy)(op, self.comm.raw()) };
        // A destroy NCCL refuses leaves one entry of the communicator's table in use:
        // nothing to report from a drop.
        let _ = status;
    }
}
