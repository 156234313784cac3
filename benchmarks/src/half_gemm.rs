//! Case 12: half-precision GEMM through cuBLAS (`bf16` and `f16` inputs and output, `f32`
//! accumulation) at 4096^3 and 8192^3, row-major `C = A B`: GPU time of one call between
//! two events, as TFLOP/s, ours (`kernels::Cublas::gemm`) against raw `cublasGemmEx` with
//! a handle bound to a raw stream, in the same run, both with split-K reductions in `f32`
//! (`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`). Both results are checked against
//! an `f64` CPU reference at sampled entries.
#![allow(unsafe_code)]

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::result;
use kernels::HalfGemm;
use stream_core::scope;

use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::RawDeviceMem;
use crate::report::{Better, Report, Row, Source};
use crate::sampling::GpuTimer;
use crate::sgemm::{check_sampled_entries, pseudo_random, RawBlas};

/// A half-precision element of the case.
trait Half: HalfGemm + cudarc::driver::DeviceRepr {
    const NAME: &'static str;
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
    /// Unit roundoff of the type.
    const U: f64;
}

impl Half for half::bf16 {
    const NAME: &'static str = "bf16";
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    const U: f64 = 1.0 / 256.0;
}

impl Half for half::f16 {
    const NAME: &'static str = "f16";
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    const U: f64 = 1.0 / 2048.0;
}

/// Runs case 12.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
    // cuBLAS is reported rather than a panic of cudarc's lazy loader.
    if !unsafe { blas_sys::is_culib_present() } {
        rep.note("hgemm: cuBLAS (libcublas) could not be loaded; nothing was measured");
        return Ok(());
    }
    let sizes: &[usize] = env.cfg.pick(&[4096, 8192], &[1024]);
    for &size in sizes {
        measure::<half::bf16>(env, rep, size)?;
        measure::<half::f16>(env, rep, size)?;
    }
    Ok(())
}

/// One row: ours against raw at `size`^3 for elements `T`.
fn measure<T: Half>(env: &Env, rep: &mut Report, size: usize) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((2, 10), (1, 3));
    let a: Vec<T> = pseudo_random(size * size, 3)
        .into_iter()
        .map(T::from_f32)
        .collect();
    let b: Vec<T> = pseudo_random(size * size, 4)
        .into_iter()
        .map(T::from_f32)
        .collect();
    let flops = 2.0 * (size as f64).powi(3);
    let n = size as u32;

    // Ours: `DeviceVec`s attached to a scope per sample.
    let (da, db) = (env.dev.upload_vec(&a)?, env.dev.upload_vec(&b)?);
    let mut dc = env.dev.alloc_vec::<T>(size * size)?;
    let mut cublas = kernels::Cublas::new(&env.dev)?;
    let timer = stream_core::GpuTimer::new(&env.dev)?;
    let mut ours = || -> Result<f64> {
        scope(&env.streams[0], |s| {
            let (a, b, mut c) = (s.attach_ref(&da)?, s.attach_ref(&db)?, s.attach(&mut dc)?);
            timer.start(s)?;
            cublas.gemm(s, n, n, n, 1.0, &a, &b, 0.0, &mut c)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    };

    // Raw: `cublasGemmEx` with a handle bound to a raw stream.
    let stream = env.raw_streams[0].0;
    let bytes = size * size * std::mem::size_of::<T>();
    let (ra, rb) = (RawDeviceMem::upload(&a)?, RawDeviceMem::upload(&b)?);
    let rc = RawDeviceMem::new(bytes)?;
    let handle = RawBlas(blas::create_handle()?);
    // SAFETY: the handle was just created; the stream is alive (owned by `Env`).
    unsafe { blas::set_stream(handle.0, stream as _) }?;
    // The same math mode as ours: split-K reductions in f32.
    // SAFETY: the handle was just created and is used by this thread alone.
    unsafe {
        blas_sys::cublasSetMathMode(
            handle.0,
            blas_sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
        )
    }
    .result()
    .map_err(|e| Error::msg(format!("cublasSetMathMode: {e:?}")))?;
    let raw_timer = GpuTimer::new()?;
    let d = i32::try_from(size).map_err(|_| Error::msg("hgemm: size exceeds i32::MAX"))?;
    let raw = || -> Result<f64> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        raw_timer.start(stream)?;
        // SAFETY: the three buffers hold `size * size` elements of `T` (`DATA_TYPE` is
        // its cuBLAS type) and stay allocated until the stream is synchronised below;
        // `alpha` and `beta` are the `f32` scalars `CUBLAS_COMPUTE_32F` reads before the
        // call returns. Row-major C = A B as column-major C^T = B^T A^T.
        let called = unsafe {
            blas::gemm_ex(
                handle.0,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                d,
                d,
                d,
                (&raw const alpha).cast(),
                rb.ptr as *const _,
                T::DATA_TYPE,
                d,
                ra.ptr as *const _,
                T::DATA_TYPE,
                d,
                (&raw const beta).cast(),
                rc.ptr as *mut _,
                T::DATA_TYPE,
                d,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        let stopped = raw_timer.stop(stream);
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(stream) }.context("cuStreamSynchronize")?;
        called?;
        stopped?;
        raw_timer.seconds()
    };

    let row = Measurement::new()
        .ours("ours", &mut ours)
        .raw("raw cublasGemmEx", raw)
        .into_row(
            env.cfg.plan(warmup, reps),
            Row::new(
                "hgemm",
                format!("cuBLAS {} GEMM {size}^3, f32 accumulation", T::NAME),
                "TFLOP/s",
                Better::Higher,
            ),
        )?
        .in_unit(|t| flops / t / 1e12);
    rep.push(row.check_vs_raw(0.98, Source::Issue));

    let mut theirs = vec![T::from_f32(0.0); size * size];
    // SAFETY: `rc` holds `size * size` elements of `T`; the stream was synchronised.
    unsafe { result::memcpy_dtoh_sync(&mut theirs, rc.ptr) }.context("cuMemcpyDtoH")?;
    check_against_cpu(
        &format!("ours {}", T::NAME),
        &dc.to_host_vec()?,
        &a,
        &b,
        size,
    )?;
    check_against_cpu(&format!("raw {}", T::NAME), &theirs, &a, &b, size)
}

/// 64 sampled entries of `c` agree with an `f64` reference within the bound
/// `test_gemm` states for `Cublas::gemm`: four units of `f32` per step (tensor cores
/// truncate while they add) and one rounding to `T`.
fn check_against_cpu<T: Half>(who: &str, c: &[T], a: &[T], b: &[T], size: usize) -> Result<()> {
    let at = |m: &[T], index: usize| m[index].to_f64();
    check_sampled_entries(
        who,
        size,
        |i| at(a, i),
        |i| at(b, i),
        |i| at(c, i),
        |exact, magnitude| {
            4.0 * (size + 3) as f64 * f64::from(f32::EPSILON / 2.0) * magnitude + T::U * exact.abs()
        },
    )
}
