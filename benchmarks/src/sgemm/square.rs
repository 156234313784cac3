//! The square SGEMM every side runs: the tiled kernel's launch shape, the raw cuBLAS
//! call and handle, and cudarc's configuration of it, written once for the GFLOP/s
//! rows and the enqueue rows.
#![allow(unsafe_code)]

use cudarc::cublas::{result as blas, sys as blas_sys, GemmConfig};

use crate::error::{Error, Result};
use crate::raw::RawDeviceMem;
use stream_core::LaunchConfig;

/// Row-major `c = a b` of square `size x size` matrices through raw `cublasSgemm` on the
/// handle's stream (as column-major `C^T = B^T A^T`: the operands swapped).
///
/// # Safety
///
/// `a`, `b` and `c` hold `size * size` floats each and stay allocated until the handle's
/// stream has run the call.
pub(super) unsafe fn raw_square_sgemm(
    handle: blas_sys::cublasHandle_t,
    size: usize,
    a: &RawDeviceMem,
    b: &RawDeviceMem,
    c: &RawDeviceMem,
) -> Result<()> {
    let d = i32::try_from(size).map_err(|_| Error::msg("sgemm: size exceeds i32::MAX"))?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the caller's contract; `alpha` and `beta` are read before the call returns
    // (the handle's default host pointer mode).
    unsafe {
        blas::sgemm(
            handle,
            blas_sys::cublasOperation_t::CUBLAS_OP_N,
            blas_sys::cublasOperation_t::CUBLAS_OP_N,
            d,
            d,
            d,
            &alpha,
            b.ptr as *const f32,
            d,
            a.ptr as *const f32,
            d,
            &beta,
            c.ptr as *mut f32,
            d,
        )
    }?;
    Ok(())
}

/// cudarc's `GemmConfig` of the same product, `C^T = B^T A^T` in column-major order (pass
/// `b` before `a`).
pub(super) fn square_gemm_config(size: usize) -> GemmConfig<f32> {
    let d = size as i32;
    GemmConfig {
        transa: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        m: d,
        n: d,
        k: d,
        alpha: 1.0f32,
        lda: d,
        ldb: d,
        beta: 0.0,
        ldc: d,
    }
}

/// A cuBLAS handle of the raw baseline, destroyed on drop.
pub(crate) struct RawBlas(pub(crate) blas_sys::cublasHandle_t);

impl Drop for RawBlas {
    fn drop(&mut self) {
        // SAFETY: created by `create_handle`, destroyed once; its work was synchronised.
        let _ = unsafe { blas::destroy_handle(self.0) };
    }
}

/// The tiled kernel's launch shape (as `kernels::sgemm_tiled` launches it).
pub(super) fn tiled_config(size: usize) -> LaunchConfig {
    kernels::sgemm_tiled_config(size as u32, size as u32)
}
