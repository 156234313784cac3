//! Helpers of the cudarc interop tests (`test_cudarc`, `test_cudarc_refusals`): cudarc
//! calls whose errors become failures, a cudarc program's context and streams, and the
//! lock that makes those tests run one at a time.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaStream};
use stream_core::interop::FromCudarcError;
use stream_core::DeviceVec;

pub use crate::serial;
use crate::{Failed, TestResult};

/// Turns a cudarc error into a failure naming the call.
pub fn cudarc<T, E: std::fmt::Debug>(what: &str, result: Result<T, E>) -> TestResult<T> {
    result.map_err(|e| Failed::from(format!("{what} failed: {e:?}")))
}

/// A new non-primary context on device `ordinal` (`cuCtxCreate`), as another library
/// makes one: current on this thread afterwards (the driver pushes it), owned by the
/// caller. Returns it with its `CUdevice`.
///
/// Made through `cuCtxCreate_v2`, called by its exported name: the one form that every
/// driver from CUDA 12.2 on exports and that no cudarc binding lacks this way (cudarc
/// binds `_v2` up to 12.2, `_v4` from 12.5 to 13.1, and neither from 13.2 on).
pub fn create_context(ordinal: usize) -> TestResult<(sys::CUcontext, sys::CUdevice)> {
    type CtxCreateV2 =
        unsafe extern "C" fn(*mut sys::CUcontext, std::ffi::c_uint, sys::CUdevice) -> sys::CUresult;
    let device = cudarc("cuDeviceGet", result::device::get(ordinal as i32))?;
    // SAFETY: loads (once) the driver library cudarc loaded for `cuDeviceGet` above.
    let libcuda = unsafe { sys::culib() };
    // SAFETY: `CtxCreateV2` is the CUDA header's signature of `cuCtxCreate_v2`.
    let create = unsafe { libcuda.get::<CtxCreateV2>(b"cuCtxCreate_v2\0") }
        .map_err(|e| Failed::from(format!("cuCtxCreate_v2 not found: {e}")))?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `device` came from `cuDeviceGet`; `ctx` is a live out-pointer; flags 0 ask
    // for the default scheduling.
    let made = unsafe { create(&raw mut ctx, 0, device) };
    cudarc("cuCtxCreate", made.result())?;
    Ok((ctx, device))
}

/// A fresh cudarc context on device 0 (its primary context) and `streams` new streams
/// of it, as a cudarc program starts.
pub fn cudarc_context(streams: usize) -> TestResult<(Arc<CudaContext>, Vec<Arc<CudaStream>>)> {
    let ctx = cudarc("CudaContext::new(0)", CudaContext::new(0))?;
    let streams = (0..streams)
        .map(|_| cudarc("CudaContext::new_stream", ctx.new_stream()))
        .collect::<TestResult<Vec<_>>>()?;
    Ok((ctx, streams))
}

/// The conversion's error as a failure that says what was refused.
pub fn converted<T>(
    what: &str,
    result: Result<DeviceVec<T>, FromCudarcError<T>>,
) -> TestResult<DeviceVec<T>>
where
    T: stream_core::DeviceRepr,
{
    result.map_err(|e| Failed::from(format!("{what}: DeviceVec::from_cudarc failed: {e}")))
}
