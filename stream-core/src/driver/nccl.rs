//! NCCL, loaded at run time through cudarc's `nccl` module: whether the library is
//! there and its version, its errors, the unique id that names a communicator being made
//! ([`RawUniqueId`]), group brackets, and the calls a communicator makes ([`Collective`],
//! [`Call`]). The communicator itself and the calls enqueued through it are in
//! `nccl_comm.rs`.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::nccl::{result, sys};

use super::nccl_group;
use super::nccl_user_op::UserReduction;
use crate::error::{Error, Nccl, Result};

/// `true` when the NCCL library (`libnccl`) can be loaded. Checking first is what turns
/// "no NCCL" into an `Err` instead of the panic cudarc's lazy loader would raise.
///
/// A library found once is remembered: the check is a `dlopen` and `dlclose`, which cost
/// about 3 µs on every `nccl::group` (measured on 2 H200s: 15-20% of a grouped small
/// all-reduce, host-bound). From its first call on, cudarc's loader holds the library,
/// so the answer does not turn false. An absent library is looked for again each time.
pub(crate) fn library_present() -> bool {
    static FOUND: AtomicBool = AtomicBool::new(false);
    if FOUND.load(Ordering::Relaxed) {
        return true;
    }
    // SAFETY: `is_culib_present` only tries to `dlopen` the library by its well-known
    // names and closes it again; it runs no library code besides the loader's.
    let present = unsafe { sys::is_culib_present() };
    if present {
        FOUND.store(true, Ordering::Relaxed);
    }
    present
}

/// `Err(NcclNotFound)` unless the library can be loaded.
pub(super) fn require_library() -> Result<()> {
    if library_present() {
        Ok(())
    } else {
        Err(Error::NcclNotFound)
    }
}

/// NCCL's version, e.g. `22805` for 2.28.5.
pub(crate) fn version() -> Result<i32> {
    require_library()?;
    result::get_nccl_version().map_err(|e| nccl_error("ncclGetVersion", e.0, None))
}

/// An [`Error::Nccl`] for a failed call: NCCL's name for `code`, its description, and
/// its last error message (about `comm`, or the thread's last call without one).
#[cold]
#[inline(never)]
pub(super) fn nccl_error(
    call: &'static str,
    code: sys::ncclResult_t,
    comm: Option<sys::ncclComm_t>,
) -> Error {
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: NCCL returns a NUL-terminated string it owns, valid at least until
            // its next call on this thread; it is copied at once.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: takes any `ncclResult_t` and returns a static string.
    let description = text(unsafe { sys::ncclGetErrorString(code) });
    // SAFETY: `comm` is a live communicator or null (NCCL then reports the thread's
    // last error); the string is copied at once.
    let last = text(unsafe { sys::ncclGetLastError(comm.unwrap_or(std::ptr::null_mut())) });
    Error::from(Nccl {
        call,
        code: code as u32,
        name: format!("{code:?}"),
        description,
        last_error: last,
    })
}

/// `Ok` for a successful NCCL status, else the error of `call`.
#[inline(always)]
pub(super) fn check(
    call: &'static str,
    status: std::result::Result<result::NcclStatus, result::NcclError>,
    comm: Option<sys::ncclComm_t>,
) -> Result<()> {
    match status {
        Ok(_) => Ok(()),
        Err(e) => Err(nccl_error(call, e.0, comm)),
    }
}

/// The 128 bytes that name a communicator being made: rank 0 makes it, every rank passes
/// the same bytes to [`RawComm::init_rank`](crate::driver::nccl_comm::RawComm::init_rank).
#[derive(Clone, Copy)]
pub(crate) struct RawUniqueId(pub(super) sys::ncclUniqueId);

/// Bytes in a [`RawUniqueId`].
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

impl RawUniqueId {
    /// A new id (`ncclGetUniqueId`; it also starts NCCL's bootstrap listener, which the
    /// other ranks reach through the address inside the id).
    pub(crate) fn new() -> Result<Self> {
        require_library()?;
        let id = result::get_uniqueid().map_err(|e| nccl_error("ncclGetUniqueId", e.0, None))?;
        Ok(RawUniqueId(id))
    }

    /// The id made by another rank, from its bytes.
    pub(crate) fn from_bytes(bytes: [u8; UNIQUE_ID_BYTES]) -> Self {
        RawUniqueId(sys::ncclUniqueId {
            internal: bytes.map(|b| b as std::ffi::c_char),
        })
    }

    /// The id's bytes, to hand to the other ranks.
    pub(crate) fn to_bytes(self) -> [u8; UNIQUE_ID_BYTES] {
        self.0.internal.map(|c| c as u8)
    }
}

/// The first NCCL with `ncclCommSplit` (2.18.1, as `ncclGetVersion` writes it).
const SPLIT_SINCE: i32 = 21801;

/// `true` when the NCCL loaded has `ncclCommSplit` (`NcclNotFound` without NCCL).
pub(crate) fn has_split() -> Result<bool> {
    Ok(version()? >= SPLIT_SINCE)
}

/// `Ok` when the NCCL loaded has `ncclCommSplit`, which `call` needs: else
/// [`Error::Library`] naming `call` and the version loaded (`NcclNotFound` without NCCL).
pub(super) fn require_split(call: &'static str) -> Result<()> {
    require_version(call, SPLIT_SINCE)
}

/// `Ok` when the NCCL loaded is `since` or newer (as `ncclGetVersion` writes it), which
/// `call` needs: else [`Error::Library`] naming `call`, the version needed and the
/// version loaded (`NcclNotFound` without NCCL). Checked before calling an entry point
/// that older libraries lack, which cudarc's loader would otherwise panic on.
pub(super) fn require_version(call: &'static str, since: i32) -> Result<()> {
    let loaded = version()?;
    if loaded >= since {
        return Ok(());
    }
    let dotted = |v: i32| format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
    Err(Error::from(crate::error::Library {
        call,
        message: format!(
            "needs NCCL {}.{} or newer; this process loaded {}",
            since / 10000,
            since / 100 % 100,
            dotted(loaded)
        ),
    }))
}

/// NCCL's `NCCL_SPLIT_NOCOLOR`: a rank that takes part in a split and joins no
/// communicator.
pub(super) const NCCL_SPLIT_NOCOLOR: c_int = -1;

/// Brackets a group of NCCL calls (`ncclGroupStart`).
pub(crate) fn group_start() -> Result<()> {
    require_library()?;
    check("ncclGroupStart", result::group_start(), None)?;
    nccl_group::opened();
    Ok(())
}

/// Ends the group [`group_start`] began (`ncclGroupEnd`): NCCL enqueues the grouped
/// calls now. Then the aborts asked for inside the group (`nccl_group.rs`) are made,
/// each on a thread of its own, as every abort is while a graph keeps the communicator
/// (whether a graph this group recorded into keeps it is known only now): NCCL allows an
/// abort concurrently with the communicator's other calls.
pub(crate) fn group_end() -> Result<()> {
    let ended = check("ncclGroupEnd", result::group_end(), None);
    let aborts = nccl_group::closed();
    // NCCL has made the group's calls: they leave their communicators' handshakes (the
    // last call of one whose abort another thread asked for makes that abort now).
    nccl_group::leave_calls();
    for abort in aborts {
        abort();
    }
    ended
}

/// NCCL's element type and reduction (`ncclDataType_t`, `ncclRedOp_t`), as the raw
/// values the calls take.
pub(crate) type DataType = sys::ncclDataType_t;
/// See [`DataType`].
pub(crate) type RedOp = sys::ncclRedOp_t;

/// A device address, as the driver's `CUdeviceptr`.
pub(crate) type DevicePtr = cudarc::driver::sys::CUdeviceptr;

/// A reduction as a collective names it: one of NCCL's own (`ncclSum`, `ncclAvg`, ...),
/// or a pre-multiplied sum this process made on the collective's communicator
/// (`nccl_reduction.rs`, `nccl_user_op.rs`), whose handle means something on that
/// communicator only.
#[derive(Debug, Clone, Copy)]
pub enum Reduction {
    /// One of NCCL's own reductions.
    Builtin(RedOp),
    /// `ncclRedOpCreatePreMulSum`'s handle, on the communicator it was made on.
    PreMulSum(UserReduction),
}

impl Reduction {
    /// The reduction's name in messages (`sum`, `pre_mul_sum`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Reduction::Builtin(RedOp::ncclSum) => "sum",
            Reduction::Builtin(RedOp::ncclProd) => "prod",
            Reduction::Builtin(RedOp::ncclMax) => "max",
            Reduction::Builtin(RedOp::ncclMin) => "min",
            Reduction::Builtin(RedOp::ncclAvg) => "avg",
            Reduction::Builtin(_) => "another NCCL reduction",
            Reduction::PreMulSum(_) => "pre_mul_sum",
        }
    }
}

/// Ranks compare reductions by what they compute: two pre-multiplied sums agree
/// whatever their handles (each communicator numbers its own) and factors (each rank's
/// factor is its own, as NCCL defines the operation).
impl PartialEq for Reduction {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Reduction::Builtin(a), Reduction::Builtin(b)) => a == b,
            (Reduction::PreMulSum(_), Reduction::PreMulSum(_)) => true,
            _ => false,
        }
    }
}

impl Eq for Reduction {}

/// One NCCL operation, with what it needs besides its buffers and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collective {
    /// Every rank's `send` reduced by the op into every rank's `recv`.
    AllReduce(Reduction),
    /// Rank `root`'s `send` into every rank's `recv`.
    Broadcast {
        /// The rank whose buffer is sent.
        root: i32,
    },
    /// Every rank's `send` reduced by the op into rank `root`'s `recv`.
    Reduce(Reduction, i32),
    /// Every rank's `count` elements of `send`, in rank order, into every rank's `recv`
    /// (`count * size` elements).
    AllGather,
    /// The reduction of every rank's `send` (`count * size` elements), block `r` of it
    /// into rank `r`'s `recv` (`count` elements).
    ReduceScatter(Reduction),
    /// `send` to rank `peer` (which receives it with a matching `Recv`).
    Send {
        /// The receiving rank.
        peer: i32,
    },
    /// `recv` from rank `peer`.
    Recv {
        /// The sending rank.
        peer: i32,
    },
}

/// One NCCL call as `nccl/ledger.rs` compares it with other ranks' (also what a graph
/// records of each captured collective, `graph/collectives.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    /// The operation's name, for the error (`"all_reduce"`).
    pub(crate) what: &'static str,
    pub(crate) collective: Collective,
    pub(crate) data_type: DataType,
    /// The element type's name, for the error.
    pub(crate) type_name: &'static str,
    /// Elements per rank (NCCL's `count`).
    pub(crate) count: usize,
    /// Bytes per element.
    pub(crate) element_bytes: usize,
}

impl Collective {
    /// The reduction of a reducing collective.
    pub(crate) fn reduction(self) -> Option<Reduction> {
        match self {
            Collective::AllReduce(op)
            | Collective::Reduce(op, _)
            | Collective::ReduceScatter(op) => Some(op),
            _ => None,
        }
    }

    /// The same collective with `op` for its reduction (the others unchanged).
    pub(crate) fn with_reduction(self, op: Reduction) -> Collective {
        match self {
            Collective::AllReduce(_) => Collective::AllReduce(op),
            Collective::Reduce(_, root) => Collective::Reduce(op, root),
            Collective::ReduceScatter(_) => Collective::ReduceScatter(op),
            other => other,
        }
    }

    /// Elements of `send` and of `recv` the operation reads and writes, on a
    /// communicator of `size` ranks with `count` elements per rank (0 for a buffer it
    /// does not use); `None` when that overflows.
    pub(crate) fn elements(self, count: usize, size: usize) -> Option<(usize, usize)> {
        Some(match self {
            Collective::AllReduce(_) | Collective::Broadcast { .. } | Collective::Reduce(..) => {
                (count, count)
            }
            Collective::AllGather => (count, count.checked_mul(size)?),
            Collective::ReduceScatter(_) => (count.checked_mul(size)?, count),
            Collective::Send { .. } => (count, 0),
            Collective::Recv { .. } => (0, count),
        })
    }
}
