//! [`UserReduction`]: a reduction NCCL made on a communicator, as the calls that take
//! one need it: its handle, and NCCL's entry points resolved with C's `int` for it.
//!
//! cudarc declares `ncclRedOp_t` as a Rust enum of NCCL's built-in values, and the
//! handles NCCL makes for its users' reductions are other numbers (`ncclNumOps` plus an
//! index, mixed with a hash of the communicator), which no value of that enum may hold.
//! So the handle stays a `c_int`, and `ncclRedOpCreatePreMulSum`, `ncclRedOpDestroy`,
//! `ncclAllReduce`, `ncclReduce` and `ncclReduceScatter` are called through their C
//! signatures, resolved once from the loaded NCCL (as `versions.rs` does for the
//! driver's). Making and destroying one: `nccl_reduction.rs`.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use cudarc::nccl::result::{NcclError, NcclStatus};
use cudarc::nccl::sys;

/// NCCL's element type, as the calls take it.
type DataType = sys::ncclDataType_t;

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
    pub(super) create_pre_mul_sum: CreatePreMulSum,
    pub(super) destroy: Destroy,
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

/// [`Calls`], resolved from the loaded NCCL once; `None` without NCCL or where it does
/// not export them all.
pub(super) fn calls() -> Option<&'static Calls> {
    static CALLS: OnceLock<Option<Calls>> = OnceLock::new();
    CALLS
        .get_or_init(|| {
            // SAFETY: `is_culib_present` only tries to `dlopen` the library by its
            // well-known names and closes it again.
            if !unsafe { sys::is_culib_present() } {
                return None;
            }
            // SAFETY: the NCCL library is present (checked above); cudarc's loader opens
            // it once and keeps it for the process, so its symbols stay valid.
            let nccl = unsafe { sys::culib() };
            Some(Calls {
                create_pre_mul_sum: entry!(nccl, "ncclRedOpCreatePreMulSum"),
                destroy: entry!(nccl, "ncclRedOpDestroy"),
                all_reduce: entry!(nccl, "ncclAllReduce"),
                reduce: entry!(nccl, "ncclReduce"),
                reduce_scatter: entry!(nccl, "ncclReduceScatter"),
            })
        })
        .as_ref()
}

/// A reduction NCCL made on a communicator, as the reducing calls take it: its handle
/// (a `c_int`, see the module docs) and the entry points that take one.
#[derive(Debug, Clone, Copy)]
pub struct UserReduction {
    op: c_int,
    calls: &'static Calls,
}

impl UserReduction {
    /// The reduction NCCL handed out as `op`, called through `calls`.
    pub(super) fn new(op: c_int, calls: &'static Calls) -> Self {
        UserReduction { op, calls }
    }

    /// NCCL's handle and the entry points (to destroy it).
    pub(super) fn parts(self) -> (c_int, &'static Calls) {
        (self.op, self.calls)
    }

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
