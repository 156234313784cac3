//! SGEMM through cuBLAS, bound to the scope's stream so it orders with the scope's
//! other work like any kernel.
//!
//! This module calls cuBLAS's raw layer and so holds `unsafe`; every block carries its
//! proof.
#![allow(unsafe_code)]

use std::marker::PhantomData;

use cudarc::cublas::{result as blas, sys as blas_sys};
use stream_core::__private::{raw_stream, read_parts, write_parts};
use stream_core::{DeviceMemory, DeviceMemoryMut, Error, Result, Scope};

/// A cuBLAS handle for one device. `Send`, not `Sync`: a handle's stream is state, so
/// one thread at a time uses it.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let mut blas = kernels::Cublas::new(&dev)?;
/// let (a, b) = (vec![1.0f32; 64 * 32], vec![2.0f32; 32 * 16]);
/// let mut c = vec![0f32; 64 * 16];
/// scope(&stream, |s| {
///     let (da, db) = (s.upload(&a)?, s.upload(&b)?);
///     let mut dc = s.alloc::<f32>(64 * 16)?;
///     blas.sgemm(s, 64, 16, 32, 1.0, &da, &db, 0.0, &mut dc)?;
///     s.copy_to_host(&dc, &mut c)?;
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(c[0], 64.0);
/// # Ok(()) }
/// ```
pub struct Cublas {
    handle: blas_sys::cublasHandle_t,
    device: stream_core::Device,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time (`!Sync`
// ensures that); every call binds the device's context first.
unsafe impl Send for Cublas {}

impl Cublas {
    /// Creates a handle on `device`. Returns an error when the cuBLAS library is missing.
    pub fn new(device: &stream_core::Device) -> Result<Self> {
        // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
        // cuBLAS is an `Err` rather than the panic of cudarc's lazy loader.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(cublas_error(
                "cublasCreate",
                "the cuBLAS library (libcublas) could not be loaded",
            ));
        }
        stream_core::__private::bind(device)?;
        let handle =
            blas::create_handle().map_err(|e| cublas_error("cublasCreate", &format!("{e:?}")))?;
        Ok(Cublas {
            handle,
            device: device.clone(),
            _not_sync: PhantomData,
        })
    }

    /// `c = alpha * a * b + beta * c`, row-major, `a` is `m x k`, `b` is `k x n`, `c` is
    /// `m x n`, enqueued on the scope's stream.
    #[allow(clippy::too_many_arguments)] // the BLAS signature, unchanged
    pub fn sgemm<'s>(
        &mut self,
        s: &'s Scope<'s, '_>,
        m: u32,
        n: u32,
        k: u32,
        alpha: f32,
        a: &impl DeviceMemory<'s, f32>,
        b: &impl DeviceMemory<'s, f32>,
        beta: f32,
        c: &mut impl DeviceMemoryMut<'s, f32>,
    ) -> Result<()> {
        crate::sgemm::check_shapes(
            [
                "cublas sgemm: a (m * k)",
                "cublas sgemm: b (k * n)",
                "cublas sgemm: c (m * n)",
            ],
            m,
            n,
            k,
            a.len(),
            b.len(),
            c.len(),
        )?;
        if s.device().ordinal() != self.device.ordinal() {
            return Err(Error::DeviceMismatch {
                memory: self.device.ordinal(),
                stream: s.device().ordinal(),
            });
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let to_i32 = |d: u32| {
            i32::try_from(d)
                .map_err(|_| cublas_error("cublasSgemm", "a dimension exceeds i32::MAX"))
        };
        let (m, n, k) = (to_i32(m)?, to_i32(n)?, to_i32(k)?);
        let (a, b, c) = (read_parts(a)[0], read_parts(b)[0], write_parts(c)[0]);
        // SAFETY: the handle belongs to this device (checked above) and the scope's
        // stream is live with the device's context current (bound by the scope).
        unsafe { blas::set_stream(self.handle, raw_stream(s) as _) }
            .map_err(|e| cublas_error("cublasSetStream", &format!("{e:?}")))?;
        // Row-major C = A B is column-major C^T = B^T A^T: swap the operands.
        // SAFETY: `a`, `b`, `c` are device memory of this scope holding exactly k*m, n*k
        // and n*m floats (checked above), borrowed for the call (`c` mutably, so it
        // aliases neither input) and freed, if at all, stream-ordered after this call;
        // `alpha` and `beta` are host scalars alive for the call, read before it returns
        // (the handle's default host pointer mode).
        unsafe {
            blas::sgemm(
                self.handle,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                n,
                m,
                k,
                &alpha,
                b as *const f32,
                n,
                a as *const f32,
                k.max(1), // cuBLAS needs a leading dimension >= 1 even when k == 0
                &beta,
                c as *mut f32,
                n,
            )
        }
        .map_err(|e| cublas_error("cublasSgemm", &format!("{e:?}")))
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        let _ = stream_core::__private::bind(&self.device);
        // SAFETY: created in `new`, destroyed once; a handle has no pending work of its
        // own (its launches are on scopes' streams, which synchronise before they end).
        let _ = unsafe { blas::destroy_handle(self.handle) };
    }
}

fn cublas_error(call: &'static str, what: &str) -> Error {
    Error::Library {
        call,
        message: what.to_owned(),
    }
}
