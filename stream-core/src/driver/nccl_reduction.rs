//! Reductions made on one communicator: [`RawPreMulSum`] (`ncclRedOpCreatePreMulSum`),
//! an RAII handle that destroys it (`ncclRedOpDestroy`), and [`UserReduction`], its
//! handle as the reducing calls take it.
//!
//! NCCL's rules (`nccl.h`, and `enqueue.cc`, which copies the operation into each call
//! "since the op handle may be destroyed before ncclGroupEnd()"): the handle is for
//! collectives on the communicator it was made on and of the element type it was made
//! for (NCCL checks both and returns an error otherwise); with
//! `ncclScalarHostImmediate` the factor is read before the create call returns; and
//! the handle "may be destroyed as soon as the last NCCL function which is given that
//! operator returns", inside a group, or after a graph captured it, too. So nothing
//! here rests on memory that outlives a call.
//!
//! Why these calls are made here, through C's `int` for the reduction, and not through
//! cudarc: cudarc declares `ncclRedOp_t` as a Rust enum of NCCL's built-in values, and
//! the handles NCCL makes for its users' reductions are other numbers (`ncclNumOps`
//! plus an index, mixed with a hash of the communicator), which no value of that enum
//! may hold. So the handle stays a `c_int`, and `ncclRedOpCreatePreMulSum`,
//! `ncclRedOpDestroy`, `ncclAllReduce`, `ncclReduce` and `ncclReduceScatter` are called
//! through their C signatures, resolved once from the loaded NCCL (as `versions.rs`
//! does for the driver's).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use cudarc::nccl::result::{NcclError, NcclStatus};
use cudarc::nccl::sys;

use super::nccl::{check, require_library, require_version, DataType, Reduction};
use super::nccl_comm::RawComm;
use crate::error::{Error, Library, Result};

/// The first NCCL with `ncclRedOpCreatePreMulSum` (2.11.4, as `ncclGetVersion` writes it).
const PRE_MUL_SUM_SINCE: i32 = 21104;

type CreatePreMulSum = unsafe extern "C" fn(
    *mut c_int,
    *mut c_void,
    sys::ncclDataType_t,
    sys::ncclScalarResidence_t,
    sys::ncclComm_t,
) -> sys::ncclResult_t;
type Destroy = unsafe extern "C" fn(c_int, sys::ncclComm_t) -> sys::ncclResult_t;
/// `ncclAllReduce` and `ncclReduceScatter` (whose count is the receive's).
type Reducing = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;
type ReduceToRoot = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> sys::ncclResult_t;

/// NCCL's entry points that take a reduction it made, with `int` for the reduction.
#[derive(Debug)]
pub(crate) struct Calls {
    create_pre_mul_sum: CreatePreMulSum,
    destroy: Destroy,
    all_reduce: Reducing,
    reduce: ReduceToRoot,
    reduce_scatter: Reducing,
}

/// The symbol `$name` of the loaded NCCL as a function of the type the field it fills
/// has; `None` (from the enclosing closure) where NCCL does not export it.
macro_rules! entry {
    ($nccl:ident, $name:literal) => {
        // SAFETY: the type asked for (the `Calls` field this fills) is the signature
        // `nccl.h` declares for the exported symbol `$name` (`ncclResult_t f(...)`, its
        // enums `int`-sized, as in cudarc's own declarations), with `int` for
        // `ncclRedOp_t`, which is how C passes an enum of that range (up to
        // `ncclMaxRedOp`, 0x7fffffff).
        *unsafe { $nccl.get(concat!($name, "\0").as_bytes()) }.ok()?
    };
}

/// [`Calls`], resolved from the loaded NCCL once.
fn calls() -> Result<&'static Calls> {
    static CALLS: OnceLock<Option<Calls>> = OnceLock::new();
    require_library()?;
    let resolved = CALLS.get_or_init(|| {
        // SAFETY: the NCCL library is present (checked above); cudarc's loader opens it
        // once and keeps it for the process, so its symbols stay valid.
        let nccl = unsafe { sys::culib() };
        Some(Calls {
            create_pre_mul_sum: entry!(nccl, "ncclRedOpCreatePreMulSum"),
            destroy: entry!(nccl, "ncclRedOpDestroy"),
            all_reduce: entry!(nccl, "ncclAllReduce"),
            reduce: entry!(nccl, "ncclReduce"),
            reduce_scatter: entry!(nccl, "ncclReduceScatter"),
        })
    });
    resolved.as_ref().ok_or_else(|| {
        Error::from(Library {
            call: "ncclRedOpCreatePreMulSum",
            message: "the NCCL loaded does not export ncclRedOpCreatePreMulSum, \
                      ncclRedOpDestroy and the reducing collectives"
                .into(),
        })
    })
}

/// A reduction NCCL made on a communicator, as the reducing calls take it: its handle
/// (a `c_int`, see the module docs) and the entry points that take one.
#[derive(Debug, Clone, Copy)]
pub struct UserReduction {
    op: c_int,
    calls: &'static Calls,
}

impl UserReduction {
    /// `ncclAllReduce` with this reduction.
    ///
    /// # Safety
    ///
    /// That of [`enqueue`](super::nccl_comm::enqueue) for an all-reduce, with `comm`
    /// live (not aborted) and `stream` live.
    pub(crate) unsafe fn all_reduce(
        self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: DataType,
        comm: sys::ncclComm_t,
        stream: sys::cudaStream_t,
    ) -> std::result::Result<NcclStatus, NcclError> {
        // SAFETY: this function's contract; the entry point is NCCL's (`calls`).
        unsafe { (self.calls.all_reduce)(send, recv, count, datatype, self.op, comm, stream) }
            .result()
    }

    /// `ncclReduce` with this reduction.
    ///
    /// # Safety
    ///
    /// As [`all_reduce`](Self::all_reduce), for a reduce to `root`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reduce(
        self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: DataType,
        root: c_int,
        comm: sys::ncclComm_t,
        stream: sys::cudaStream_t,
    ) -> std::result::Result<NcclStatus, NcclError> {
        // SAFETY: this function's contract; the entry point is NCCL's (`calls`).
        unsafe { (self.calls.reduce)(send, recv, count, datatype, self.op, root, comm, stream) }
            .result()
    }

    /// `ncclReduceScatter` with this reduction.
    ///
    /// # Safety
    ///
    /// As [`all_reduce`](Self::all_reduce), for a reduce-scatter.
    pub(crate) unsafe fn reduce_scatter(
        self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: DataType,
        comm: sys::ncclComm_t,
        stream: sys::cudaStream_t,
    ) -> std::result::Result<NcclStatus, NcclError> {
        let reduce_scatter = self.calls.reduce_scatter;
        // SAFETY: this function's contract; the entry point is NCCL's (`calls`).
        unsafe { reduce_scatter(send, recv, count, datatype, self.op, comm, stream) }.result()
    }
}

#[cfg(test)]
impl UserReduction {
    /// A handle `op` for the ledger's host tests, which compare calls and issue none:
    /// every entry point answers `ncclInvalidUsage` without calling NCCL.
    pub(crate) fn for_tests(op: c_int) -> Self {
        unsafe extern "C" fn refuse_create(
            _: *mut c_int,
            _: *mut c_void,
            _: sys::ncclDataType_t,
            _: sys::ncclScalarResidence_t,
            _: sys::ncclComm_t,
        ) -> sys::ncclResult_t {
            sys::ncclResult_t::ncclInvalidUsage
        }
        unsafe extern "C" fn refuse_destroy(_: c_int, _: sys::ncclComm_t) -> sys::ncclResult_t {
            sys::ncclResult_t::ncclInvalidUsage
        }
        unsafe extern "C" fn refuse_reducing(
            _: *const c_void,
            _: *mut c_void,
            _: usize,
            _: sys::ncclDataType_t,
            _: c_int,
            _: sys::ncclComm_t,
            _: sys::cudaStream_t,
        ) -> sys::ncclResult_t {
            sys::ncclResult_t::ncclInvalidUsage
        }
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn refuse_reduce(
            _: *const c_void,
            _: *mut c_void,
            _: usize,
            _: sys::ncclDataType_t,
            _: c_int,
            _: c_int,
            _: sys::ncclComm_t,
            _: sys::cudaStream_t,
        ) -> sys::ncclResult_t {
            sys::ncclResult_t::ncclInvalidUsage
        }
        static REFUSING: Calls = Calls {
            create_pre_mul_sum: refuse_create,
            destroy: refuse_destroy,
            all_reduce: refuse_reducing,
            reduce: refuse_reduce,
            reduce_scatter: refuse_reducing,
        };
        UserReduction {
            op,
            calls: &REFUSING,
        }
    }
}

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
        require_version("ncclRedOpCreatePreMulSum", PRE_MUL_SUM_SINCE)?;
        let calls = calls()?;
        if comm.control().is_aborted() {
            return Err(super::nccl_comm::aborted());
        }
        let (mut op, mut factor): (c_int, [u8; 8]) = (0, factor);
        // SAFETY: `comm` is a live communicator (not aborted: checked above, and only this
        // thread, which holds it, aborts it or calls NCCL with it: `RawComm` is not
        // `Sync`); `op` is a live `int` NCCL writes; `factor` holds 8 bytes, and NCCL
        // reads the element type's size of them (at most 8: its largest types are 8
        // bytes) before returning, as `ncclScalarHostImmediate` promises.
        let status = unsafe {
            (calls.create_pre_mul_sum)(
                &raw mut op,
                factor.as_mut_ptr().cast::<c_void>(),
                data_type,
                sys::ncclScalarResidence_t::ncclScalarHostImmediate,
                comm.raw(),
            )
        };
        check(
            "ncclRedOpCreatePreMulSum",
            status.result(),
            Some(comm.raw()),
        )?;
        Ok(RawPreMulSum {
            comm,
            reduction: UserReduction { op, calls },
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
        if self.comm.control().is_aborted() {
            return;
        }
        let UserReduction { op, calls } = self.reduction;
        // SAFETY: `op` was made on `self.comm`, which is live (borrowed; not aborted:
        // checked above, and only this thread aborts it, as in `new`), and is destroyed
        // once, here. Every NCCL call given it has returned (each is a call of this
        // thread, which is running this drop), which is all NCCL requires.
        let status = unsafe { (calls.destroy)(op, self.comm.raw()) };
        // A destroy NCCL refuses leaves one entry of the communicator's table in use:
        // nothing to report from a drop.
        let _ = status;
    }
}
