//! SGEMM through cuBLAS, bound to the scope's stream so it orders with the scope's
//! other work like any kernel.
//!
//! # One handle, several streams
//!
//! A cuBLAS handle owns one default workspace, which every stream it is used on would
//! share: two GEMMs issued through one handle on two unordered streams (a scope and a
//! fork's child, say) could then write the same scratch memory at once. So every call
//! gives cuBLAS the workspace of its own stream (`cublasSetStream`, which resets the
//! workspace to the default, then `cublasSetWorkspace`): the stream's scratch memory
//! ([`interop::with_stream_scratch`]), one block per stream, kept from the first call on
//! that stream until the stream is dropped, and lent to one call at a time. Work on one
//! stream runs in order, so two GEMMs never use one block at once, and two streams have
//! two blocks. A call therefore allocates nothing after the first on its stream (the
//! earlier design allocated and freed a workspace from the device's pool in every call,
//! which cost 0.7 to 0.9 µs of host time per GEMM on an H100). In a graph capture the workspace is
//! an allocation of the graph's own, made and freed in each replay.
//!
//! # Handles are never destroyed inside a scope
//!
//! `cublasDestroy` waits for the whole device. A dropped [`Cublas`] gives its handle to
//! the device's list of idle handles, which the next [`Cublas::new`] on that device
//! takes; the handles are destroyed when the device's last handle is dropped, a point
//! the user chose.
//!
//! This module calls cuBLAS's raw layer and so holds `unsafe`; every block carries its
//! proof.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use crate::Op;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::sys;
use stream_core::interop::{self, device_ptr, device_ptr_mut, raw_stream_of};
use stream_core::{DeviceMemory, DeviceMemoryMut, DeviceRepr, Enqueue, Error, Result};

/// The workspace cuBLAS asks for: 32 MiB on Hopper and later, 4 MiB before (the
/// cuBLAS documentation of `cublasSetWorkspace`).
fn workspace_bytes(compute_capability: (i32, i32)) -> usize {
    if compute_capability.0 >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}

/// A cuBLAS handle for one device. `Send`, not `Sync`: a handle's stream is state, so
/// one thread at a time uses it. Any number of scopes and streams may use one handle;
/// each call gets a workspace of its own (see the [module docs](self)).
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
    /// Where the handle goes when this value is dropped.
    idle: Arc<IdleHandles>,
    device: stream_core::Device,
    workspace_bytes: usize,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time (`!Sync`
// ensures that); every call binds the device's context first.
unsafe impl Send for Cublas {}

/// The idle cuBLAS handles of one device (an `interop::device_extension`), destroyed
/// when the device is dropped.
#[derive(Default)]
struct IdleHandles(Mutex<Vec<RawHandle>>);

/// A handle no [`Cublas`] uses.
struct RawHandle(blas_sys::cublasHandle_t);

// SAFETY: an idle handle is only moved between threads (under the mutex), never used
// by two at once; whoever takes it out binds the device's context before using it.
unsafe impl Send for RawHandle {}

impl Drop for IdleHandles {
    /// Runs when the device's last handle is dropped, with its context bound (see
    /// `interop::device_extension`).
    fn drop(&mut self) {
        let handles = std::mem::take(self.0.get_mut().unwrap_or_else(PoisonError::into_inner));
        for RawHandle(handle) in handles {
            // DEVICE-WIDE SYNC: cublasDestroy, reached only when the device is dropped.
            // SAFETY: created by `cublasCreate` in this device's context (bound by the
            // device's drop), destroyed once: idle handles are owned by this list alone.
            // Its work ran inside scopes, which all ended (each holds the device).
            let _ = unsafe { blas::destroy_handle(handle) };
        }
    }
}

impl Cublas {
    /// A handle on `device`: an idle one of the device's, or a new one. Returns an error
    /// when the cuBLAS library is missing.
    pub fn new(device: &stream_core::Device) -> Result<Self> {
        // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
        // cuBLAS is an `Err` rather than the panic of cudarc's lazy loader.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(cublas_error(
                "cublasCreate",
                "the cuBLAS library (libcublas) could not be loaded",
            ));
        }
        let idle = interop::device_extension(device, IdleHandles::default);
        let reused = idle.0.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let handle = match reused {
            Some(RawHandle(handle)) => handle,
            None => {
                let _bound = interop::bind(device)?;
                blas::create_handle()
                    .map_err(|e| cublas_error("cublasCreate", &format!("{e:?}")))?
            }
        };
        // Split-K reductions in `f32`, never in a half-precision output's type (which
        // cuBLAS allows by default, as PyTorch does): `gemm` promises `f32`
        // accumulation. No effect on `sgemm`, whose output is `f32`.
        // SAFETY: a live handle of this device, used by this thread alone.
        unsafe {
            blas_sys::cublasSetMathMode(
                handle,
                blas_sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        }
        .result()
        .map_err(|e| cublas_error("cublasSetMathMode", &format!("{e:?}")))?;
        Ok(Cublas {
            handle,
            idle,
            device: device.clone(),
            workspace_bytes: workspace_bytes(device.compute_capability()),
            _not_sync: PhantomData,
        })
    }

    /// `c = alpha * a * b + beta * c`, row-major, `a` is `m x k`, `b` is `k x n`, `c` is
    /// `m x n`, enqueued on the scope's stream, or recorded into a graph when `s` is a
    /// [`Capture`](stream_core::Capture) (cuBLAS supports stream capture; the call's
    /// workspace is then an allocation of the graph's own, made and freed in each
    /// replay). On a scope, the workspace is the stream's scratch memory (32 MiB on
    /// Hopper, 4 MiB before), allocated by the first call on the stream and kept until
    /// the stream is dropped (see the [module docs](self)). Transposed operands:
    /// [`sgemm_op`](Self::sgemm_op).
    #[allow(clippy::too_many_arguments)] // the BLAS signature, unchanged
    pub fn sgemm<'s>(
        &mut self,
        s: &'s impl Enqueue<'s>,
        m: u32,
        n: u32,
        k: u32,
        alpha: f32,
        a: &impl DeviceMemory<'s, f32>,
        b: &impl DeviceMemory<'s, f32>,
        beta: f32,
        c: &mut impl DeviceMemoryMut<'s, f32>,
    ) -> Result<()> {
        self.sgemm_op(s, Op::N, Op::N, m, n, k, alpha, a, b, beta, c)
    }

    /// `c = alpha * op_a(a) * op_b(b) + beta * c`, row-major: [`sgemm`](Self::sgemm)
    /// with either operand stored transposed (BLAS's `op`, see [`Op`]): `op_a(a)` is `m x
    /// k`, `op_b(b)` is `k x n`, so `a` holds `m * k` elements and `b` `k * n` either way.
    #[allow(clippy::too_many_arguments)] // the BLAS signature
    pub fn sgemm_op<'s>(
        &mut self,
        s: &'s impl Enqueue<'s>,
        op_a: Op,
        op_b: Op,
        m: u32,
        n: u32,
        k: u32,
        alpha: f32,
        a: &impl DeviceMemory<'s, f32>,
        b: &impl DeviceMemory<'s, f32>,
        beta: f32,
        c: &mut impl DeviceMemoryMut<'s, f32>,
    ) -> Result<()> {
        let names = [
            "cublas sgemm: a (m * k)",
            "cublas sgemm: b (k * n)",
            "cublas sgemm: c (m * n)",
        ];
        self.run(
            "cublasSgemm",
            names,
            (m, n, k),
            (a, b, c),
            s,
            |handle, [a, b, c], (m, n, k)| {
                let ([op_b, op_a], [ldb, lda]) = column_major(op_a, op_b, (m, n, k));
                // SAFETY: `a`, `b`, `c` are device memory of the scope holding exactly k*m,
                // n*k and n*m floats (checked by `run`), which `column_major`'s operations
                // and leading dimensions read as the stored matrices; borrowed for the call
                // (`c` mutably, so it aliases neither input) and freed, if at all,
                // stream-ordered after this call; `alpha` and `beta` are host scalars alive
                // for the call, read before it returns (the handle's default host pointer
                // mode); `run` bound the handle to the scope's stream and a workspace of
                // this call's alone.
                unsafe {
                    blas::sgemm(
                        handle,
                        op_b,
                        op_a,
                        n,
                        m,
                        k,
                        &alpha,
                        b as *const f32,
                        ldb,
                        a as *const f32,
                        lda,
                        &beta,
                        c as *mut f32,
                        n,
                    )
                }
            },
        )
    }

    /// [`sgemm`](Self::sgemm) for half-precision matrices (`half::f16` or `half::bf16`),
    /// accumulated in `f32` (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`, split-K reductions in
    /// `f32` too: `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`, which cuBLAS and
    /// PyTorch do not set by default): `alpha` and `beta` are `f32`, and each element of
    /// `c` is rounded once, from the `f32` result.
    ///
    /// ```no_run
    /// use half::bf16;
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let mut blas = kernels::Cublas::new(&dev)?;
    /// let a = vec![bf16::from_f32(1.0); 64 * 32];
    /// let b = vec![bf16::from_f32(0.5); 32 * 16];
    /// let mut c = vec![bf16::ZERO; 64 * 16];
    /// scope(&stream, |s| {
    ///     let (da, db) = (s.upload(&a)?, s.upload(&b)?);
    ///     let mut dc = s.alloc::<bf16>(64 * 16)?;
    ///     blas.gemm(s, 64, 16, 32, 1.0, &da, &db, 0.0, &mut dc)?;
    ///     s.copy_to_host(&dc, &mut c)?.wait()?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!(c[0], bf16::from_f32(16.0)); // 32 products of 0.5
    /// # Ok(()) }
    /// ```
    #[allow(clippy::too_many_arguments)] // the BLAS signature, unchanged
    pub fn gemm<'s, T: HalfGemm>(
        &mut self,
        s: &'s impl Enqueue<'s>,
        m: u32,
        n: u32,
        k: u32,
        alpha: f32,
        a: &impl DeviceMemory<'s, T>,
        b: &impl DeviceMemory<'s, T>,
        beta: f32,
        c: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        self.gemm_op(s, Op::N, Op::N, m, n, k, alpha, a, b, beta, c)
    }

    /// [`gemm`](Self::gemm) with either operand stored transposed, as
    /// [`sgemm_op`](Self::sgemm_op).
    #[allow(clippy::too_many_arguments)] // the BLAS signature
    pub fn gemm_op<'s, T: HalfGemm>(
        &mut self,
        s: &'s impl Enqueue<'s>,
        op_a: Op,
        op_b: Op,
        m: u32,
        n: u32,
        k: u32,
        alpha: f32,
        a: &impl DeviceMemory<'s, T>,
        b: &impl DeviceMemory<'s, T>,
        beta: f32,
        c: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let names = [
            "cublas gemm: a (m * k)",
            "cublas gemm: b (k * n)",
            "cublas gemm: c (m * n)",
        ];
        let element = T::DATA_TYPE;
        self.run(
            "cublasGemmEx",
            names,
            (m, n, k),
            (a, b, c),
            s,
            |handle, [a, b, c], (m, n, k)| {
                let ([op_b, op_a], [ldb, lda]) = column_major(op_a, op_b, (m, n, k));
                // SAFETY: as `sgemm_op`'s, for elements of `T` (`element` is its cuBLAS type,
                // so cuBLAS reads and writes exactly the checked counts of 2-byte elements);
                // `alpha` and `beta` are the `f32` scalars `CUBLAS_COMPUTE_32F` reads.
                unsafe {
                    blas::gemm_ex(
                        handle,
                        op_b,
                        op_a,
                        n,
                        m,
                        k,
                        (&raw const alpha).cast(),
                        b as *const std::ffi::c_void,
                        element,
                        ldb,
                        a as *const std::ffi::c_void,
                        element,
                        lda,
                        (&raw const beta).cast(),
                        c as *mut std::ffi::c_void,
                        element,
                        n,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
            },
        )
    }

    /// What every GEMM does around its cuBLAS call: checks the shapes of `a`, `b` and
    /// `c` (named by `names`) and the device, then binds the handle to the stream of `s`
    /// and a workspace of this call's alone, and runs `gemm` with the handle, the
    /// addresses of a, b and c, and `(m, n, k)` as cuBLAS's `int`s.
    fn run<'s, T: DeviceRepr>(
        &mut self,
        call: &'static str,
        names: [&'static str; 3],
        (m, n, k): (u32, u32, u32),
        (a, b, c): (
            &impl DeviceMemory<'s, T>,
            &impl DeviceMemory<'s, T>,
            &mut impl DeviceMemoryMut<'s, T>,
        ),
        s: &'s impl Enqueue<'s>,
        gemm: impl Fn(
            blas_sys::cublasHandle_t,
            [sys::CUdeviceptr; 3],
            (i32, i32, i32),
        ) -> std::result::Result<(), blas::CublasError>,
    ) -> Result<()> {
        crate::sgemm::check_shapes(names, m, n, k, a.len(), b.len(), c.len())?;
        let operands = [device_ptr(a), device_ptr(b), device_ptr_mut(c)];
        s.ensure_same_device(&self.device)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let to_i32 = |d: u32| {
            i32::try_from(d).map_err(|_| cublas_error(call, "a dimension exceeds i32::MAX"))
        };
        let dims = (to_i32(m)?, to_i32(n)?, to_i32(k)?);
        let handle = self.handle;
        let stream = raw_stream_of(s);
        let _bound = interop::bind(&self.device)?;
        let gemm = &gemm;
        // Binds the handle to the stream and the workspace, then enqueues the GEMM.
        let enqueue = |workspace: sys::CUdeviceptr| -> Result<()> {
            // SAFETY: the handle belongs to this device (checked above), whose context is
            // bound; the scope's (or the capture's) stream is live for the whole scope (or
            // capture).
            unsafe { blas::set_stream(handle, stream as _) }
                .map_err(|e| cublas_error("cublasSetStream", &format!("{e:?}")))?;
            // SAFETY: after `cublasSetStream` (which resets the workspace to the default),
            // the handle's calls on this stream use `workspace`: `workspace_bytes` of
            // device memory valid for work enqueued on this stream now (the stream's
            // scratch, lent to this call alone, or this capture's own allocation), which
            // no other work uses while the GEMM below runs.
            unsafe {
                blas_sys::cublasSetWorkspace_v2(
                    handle,
                    workspace as *mut std::ffi::c_void,
                    self.workspace_bytes,
                )
            }
            .result()
            .map_err(|e| cublas_error("cublasSetWorkspace", &format!("{e:?}")))?;
            gemm(handle, operands, dims).map_err(|e| cublas_error(call, &format!("{e:?}")))
        };
        // On a scope: the stream's scratch memory, lent to this call for as long as it
        // enqueues (see the module docs).
        if let Some(done) = interop::with_stream_scratch(s, self.workspace_bytes, enqueue)? {
            return done;
        }
        // In a capture: an allocation of the graph's own, made and freed in each replay
        // (freed, stream-ordered after the GEMM, when `workspace` drops at the end of
        // this call).
        let mut workspace = s.alloc::<u8>(self.workspace_bytes)?;
        enqueue(device_ptr_mut(&mut workspace))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// The half-precision element types of [`Cublas::gemm`]: `half::f16` and `half::bf16`.
/// Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a half-precision element of `Cublas::gemm`",
    note = "`Cublas::gemm` multiplies `half::f16` or `half::bf16` matrices; use `Cublas::sgemm` for `f32`"
)]
pub trait HalfGemm: DeviceRepr + sealed::Sealed {
    /// cuBLAS's name for the type.
    #[doc(hidden)]
    const DATA_TYPE: blas_sys::cudaDataType;
}

impl HalfGemm for half::f16 {
    const DATA_TYPE: blas_sys::cudaDataType = blas_sys::cudaDataType::CUDA_R_16F;
}

impl HalfGemm for half::bf16 {
    const DATA_TYPE: blas_sys::cudaDataType = blas_sys::cudaDataType::CUDA_R_16BF;
}

impl Drop for Cublas {
    /// Gives the handle to the device's idle list (no driver call: `cublasDestroy` would
    /// wait for the whole device; see the [module docs](self)).
    fn drop(&mut self) {
        self.idle
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(RawHandle(self.handle));
    }
}

fn cublas_error(call: &'static str, what: &str) -> Error {
    Error::from(stream_core::error::Library {
        call,
        message: what.to_owned(),
    })
}

/// cuBLAS's operations and leading dimensions for the row-major `c (m x n) = op_a(a)
/// op_b(b)`, which cuBLAS (column-major) computes as `c^T = op_b(b)^T op_a(a)^T`: the
/// operands swapped, `b` first. A row-major matrix stored `r x c` is, read column-major,
/// its transpose with leading dimension `c`; so `b` is read as stored with `op_b` (`k x
/// n` stored, leading dimension `n`; transposed: `n x k`, `k`) and `a` likewise (`m x k`,
/// `k`; transposed: `k x m`, `m`). Returns `[op for b, op for a]`, `[ldb, lda]`, each
/// leading dimension at least 1 (cuBLAS asks that even when a dimension is 0).
fn column_major(
    op_a: Op,
    op_b: Op,
    (m, n, k): (i32, i32, i32),
) -> ([blas_sys::cublasOperation_t; 2], [i32; 2]) {
    let op = |o: Op| match o {
        Op::N => blas_sys::cublasOperation_t::CUBLAS_OP_N,
        Op::T => blas_sys::cublasOperation_t::CUBLAS_OP_T,
    };
    let ldb = match op_b {
        Op::N => n,
        Op::T => k,
    };
    let lda = match op_a {
        Op::N => k,
        Op::T => m,
    };
    ([op(op_b), op(op_a)], [ldb.max(1), lda.max(1)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use blas_sys::cublasOperation_t::{CUBLAS_OP_N as N, CUBLAS_OP_T as T};

    #[test]
    fn operands_are_swapped_and_read_as_stored() {
        let (m, n, k) = (2, 3, 5);
        assert_eq!(column_major(Op::N, Op::N, (m, n, k)), ([N, N], [n, k]));
        assert_eq!(column_major(Op::T, Op::N, (m, n, k)), ([N, T], [n, m]));
        assert_eq!(column_major(Op::N, Op::T, (m, n, k)), ([T, N], [k, k]));
        assert_eq!(column_major(Op::T, Op::T, (m, n, k)), ([T, T], [k, m]));
        // cuBLAS asks for leading dimensions of at least 1, also for an empty k.
        assert_eq!(column_major(Op::N, Op::T, (m, n, 0)), ([T, N], [1, 1]));
    }
}
