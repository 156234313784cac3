//! What the driver's result codes mean to us: which end the context ([`STICKY`]), what
//! to advise about a failed call, out of memory, and `.call("cuXxx")` for turning a
//! cudarc `DriverError` into an [`Error`].

use cudarc::driver::{result::DriverError, sys};

use super::{Error, Result};

/// The driver's *sticky* errors: the ones the CUDA driver API documents as ending the
/// context. For all but `CUDA_ERROR_ASSERT` its wording is: "This leaves the process in
/// an inconsistent state and any further CUDA work will return the same error. To
/// continue using CUDA, the process must be terminated and relaunched."; for
/// `CUDA_ERROR_ASSERT`: "The context cannot be used anymore, and must be destroyed."
///
/// The safety model rests on this wording: a synchronisation that fails with one of
/// these proves that the context runs no more work, so no DMA into host memory can
/// continue, and only then may a failed synchronisation release host borrows. Any
/// other failure of a synchronisation proves nothing and aborts the process.
pub(crate) const STICKY: [sys::CUresult; 10] = {
    use sys::CUresult::*;
    [
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_ASSERT,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_EXTERNAL_DEVICE,
    ]
};

/// `true` when `code` (a `CUresult`) is one of the [`STICKY`] errors.
pub(crate) fn is_sticky_code(code: u32) -> bool {
    STICKY.iter().any(|&c| c as u32 == code)
}

/// What to do about a failed driver call with `code`: a kernel fault poisons the context
/// for the rest of the process (the driver reports it from whichever call comes next),
/// anything else is most likely this call's own arguments.
pub(super) fn driver_advice(code: u32) -> &'static str {
    if is_sticky_code(code) {
        "a kernel faulted on the GPU (this call only reported it), and the CUDA context is \
         unusable from now on: every later call on this device fails with this error, so \
         restart the process (run it under compute-sanitizer to find the faulting kernel)"
    } else {
        "check the call's arguments, and note that a fault in earlier asynchronous work \
         (a kernel reading an illegal address) makes every later call on the device fail \
         until the process restarts"
    }
}

/// Extension for driver results: `.call("cuXxx")?` turns a `DriverError` into [`Error`].
pub(crate) trait DriverResultExt<T> {
    fn call(self, name: &'static str) -> Result<T>;
}

impl<T> DriverResultExt<T> for std::result::Result<T, DriverError> {
    #[inline]
    fn call(self, name: &'static str) -> Result<T> {
        self.map_err(|e| Error::driver(name, e))
    }
}

/// `true` for the driver's out-of-memory code.
#[inline]
pub(crate) fn is_out_of_memory(err: &DriverError) -> bool {
    err.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::CUresult::*;

    #[test]
    fn the_sticky_codes_and_only_they_end_the_context() {
        for code in STICKY {
            assert!(is_sticky_code(code as u32), "{code:?} is sticky");
            assert!(driver_advice(code as u32).contains("restart the process"));
        }
        // A call's own failures, which leave the context usable.
        for code in [
            CUDA_ERROR_OUT_OF_MEMORY,
            CUDA_ERROR_INVALID_VALUE,
            CUDA_ERROR_NOT_READY,
            CUDA_ERROR_INVALID_HANDLE,
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        ] {
            assert!(!is_sticky_code(code as u32), "{code:?} is not sticky");
            assert!(driver_advice(code as u32).contains("check the call's arguments"));
        }
        assert!(!is_sticky_code(CUDA_SUCCESS as u32));
    }

    #[test]
    fn out_of_memory_is_the_drivers_code_alone() {
        assert!(is_out_of_memory(&DriverError(CUDA_ERROR_OUT_OF_MEMORY)));
        assert!(!is_out_of_memory(&DriverError(CUDA_ERROR_INVALID_VALUE)));
        assert!(!is_out_of_memory(&DriverError(CUDA_ERROR_ILLEGAL_ADDRESS)));
    }
}
