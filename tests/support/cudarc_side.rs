//! Helpers of the cudarc interop tests (`test_cudarc`, `test_cudarc_refusals`): cudarc
//! calls whose errors become failures, a cudarc program's context and streams, and the
//! lock that makes those tests run one at a time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};
use stream_core::interop::FromCudarcError;
use stream_core::DeviceVec;

use crate::{Failed, TestResult};

/// The lock that makes the cudarc tests run one at a time (see `test_cudarc`'s docs):
/// within one binary; the binaries themselves run one after another.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Turns a cudarc error into a failure naming the call.
pub fn cudarc<T, E: std::fmt::Debug>(what: &str, result: Result<T, E>) -> TestResult<T> {
    result.map_err(|e| Failed::from(format!("{what} failed: {e:?}")))
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
