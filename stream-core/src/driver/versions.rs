//! What differs between the CUDA versions whose bindings cudarc can compile (the program
//! picks one: see stream-core's Cargo features), held to the C ABI that every driver
//! from CUDA 12.2 (R535) on exports, so that this crate builds with any binding from
//! 12.2 to the latest and runs on any such driver:
//!
//! * `CUmemLocation`, whose `id` CUDA 13.2's header moved into an anonymous union of
//!   one member (the same layout): [`mem_location`] builds it with either binding;
//! * entry points that some bindings lack or that some drivers lack, called through
//!   their exported names and signatures, resolved once from the loaded `libcuda`:
//!   `cuStreamGetCaptureInfo_v2` (bindings before 12.3 have no `_v3`, which this crate
//!   does not need; drivers keep `_v2` for programs built against 12.x), and
//!   `cuModuleGetFunctionCount`, `cuModuleEnumerateFunctions` and `cuFuncLoad` (CUDA
//!   12.4: neither older bindings nor older drivers have them).

use std::ffi::c_int;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{DriverResultExt, Error, Result};

/// `CUmemLocation` as every CUDA header lays it out: the location's type, then the
/// device ordinal or NUMA node (`int`), ignored for the host.
#[repr(C)]
struct MemLocation {
    type_: sys::CUmemLocationType,
    id: c_int,
}

/// A `CUmemLocation` of `type_` and `id`, with any CUDA binding.
pub(crate) fn mem_location(type_: sys::CUmemLocationType, id: c_int) -> sys::CUmemLocation {
    // SAFETY: `sys::CUmemLocation` is `struct { CUmemLocationType type; int id; }` in the
    // CUDA headers up to 13.1 and `struct { CUmemLocationType type; union { int id; }; }`
    // from 13.2 on: both `#[repr(C)]` with the same two 4-byte fields at offsets 0 and 4,
    // which `MemLocation` repeats (`transmute` checks that the sizes agree). Every bit
    // pattern of an `int` is a valid `id`, and `type_` is a valid enum value.
    unsafe { std::mem::transmute::<MemLocation, sys::CUmemLocation>(MemLocation { type_, id }) }
}

/// The entry point `$name` of the loaded driver library as a function of type `$ty`,
/// resolved once; `None` where the driver does not export it.
macro_rules! entry_point {
    ($name:literal as $ty:ty) => {{
        static ENTRY: OnceLock<Option<$ty>> = OnceLock::new();
        *ENTRY.get_or_init(|| {
            // SAFETY: the driver library cudarc loaded (this crate only gets here after a
            // device was opened through it), so loading it runs no initialiser again.
            let libcuda = unsafe { sys::culib() };
            // SAFETY: `$ty` is the signature the CUDA header declares for the exported
            // symbol `$name`, which is what the driver exports under that name for every
            // version that has it (a new signature gets a new `_vN` name).
            unsafe { libcuda.get::<$ty>(concat!($name, "\0").as_bytes()) }
                .ok()
                .map(|symbol| *symbol)
        })
    }};
}

/// `cuStreamGetCaptureInfo_v2` (CUDA 12.0's header; exported since 11.3).
type CaptureInfoV2 = unsafe extern "C" fn(
    sys::CUstream,
    *mut sys::CUstreamCaptureStatus,
    *mut sys::cuuint64_t,
    *mut sys::CUgraph,
    *mut *const sys::CUgraphNode,
    *mut usize,
) -> sys::CUresult;

/// `stream`'s capture status, and when it is capturing, the driver's own array of the
/// nodes its next work would depend on (valid until the next call on the stream) and
/// its length.
///
/// # Safety
///
/// `stream` is a live stream.
pub(crate) unsafe fn capture_info(
    stream: sys::CUstream,
) -> Result<(sys::CUstreamCaptureStatus, *const sys::CUgraphNode, usize)> {
    let info = entry_point!("cuStreamGetCaptureInfo_v2" as CaptureInfoV2)
        .ok_or_else(|| missing("cuStreamGetCaptureInfo_v2"))?;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut dependencies: *const sys::CUgraphNode = std::ptr::null();
    let mut count: usize = 0;
    // SAFETY: `stream` is live (the caller's contract); the call writes the status, a
    // pointer to the driver's own array and its length into the three live locals, and
    // skips the optional outputs it is given as null.
    unsafe {
        info(
            stream,
            &raw mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &raw mut dependencies,
            &raw mut count,
        )
    }
    .result()
    .call("cuStreamGetCaptureInfo")?;
    Ok((status, dependencies, count))
}

type FunctionCount = unsafe extern "C" fn(*mut std::ffi::c_uint, sys::CUmodule) -> sys::CUresult;
type EnumerateFunctions =
    unsafe extern "C" fn(*mut sys::CUfunction, std::ffi::c_uint, sys::CUmodule) -> sys::CUresult;
type FuncLoad = unsafe extern "C" fn(sys::CUfunction) -> sys::CUresult;

/// Loads every function of `module` onto its device now (`cuFuncLoad` on each);
/// `Ok(false)`, doing nothing, where the driver has no such entry points (before 12.4).
///
/// # Safety
///
/// `module` is a loaded module, and its context is current.
pub(crate) unsafe fn load_every_function(module: sys::CUmodule) -> Result<bool> {
    let (Some(count_of), Some(enumerate), Some(load)) = (
        entry_point!("cuModuleGetFunctionCount" as FunctionCount),
        entry_point!("cuModuleEnumerateFunctions" as EnumerateFunctions),
        entry_point!("cuFuncLoad" as FuncLoad),
    ) else {
        return Ok(false);
    };
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: the module is loaded (the caller's contract); `count` is a live out-pointer.
    unsafe { count_of(&raw mut count, module) }
        .result()
        .call("cuModuleGetFunctionCount")?;
    let mut functions: Vec<sys::CUfunction> = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `functions` has room for exactly `count` handles.
    unsafe { enumerate(functions.as_mut_ptr(), count, module) }
        .result()
        .call("cuModuleEnumerateFunctions")?;
    for function in functions {
        // SAFETY: `function` belongs to this loaded module, whose context is current.
        unsafe { load(function) }.result().call("cuFuncLoad")?;
    }
    Ok(true)
}

/// The error for an entry point the loaded driver does not export.
#[cold]
fn missing(name: &'static str) -> Error {
    Error::driver(
        name,
        cudarc::driver::result::DriverError(sys::CUresult::CUDA_ERROR_NOT_FOUND),
    )
}
