//! Case 16: the `kernels` crate's memory-bound kernels, where the GPU pays: `axpy` and
//! `dot` of `f32` vectors of 64 Mi elements (256 MiB each), as GB/s of the bytes each one
//! must move (`axpy` reads x and y and writes y: 12 bytes an element; `dot` reads x and y:
//! 8), GPU time of one call between two events. Ours (`kernels::axpy`, `kernels::dot`,
//! its deterministic two passes) against raw cuBLAS (`cublasSaxpy_v2`, `cublasSdot_v2`
//! with its result in device memory) on a raw stream, in the same run. A note gives a
//! device-to-device copy of the same vector (`cuMemcpyDtoDAsync`, reading and writing
//! 4 bytes an element) as the ceiling. `axpy` also runs on the first quarter of the
//! vectors (16 Mi), where the launch shape shows; `kernels::fill` runs at both lengths
//! against `cuMemsetD32Async` (4 bytes written an element). The dot products are checked
//! against an `f64` CPU sum. Then the transpose of an 8192x8192 `f32` matrix
//! (`kernels::transpose`) against `cublasSgeam` (8 bytes an element), both outputs
//! checked bit for bit.
#![allow(unsafe_code)]

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result, sys};
use stream_core::{scope, GpuTimer as OurTimer};

use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::RawDeviceMem;
use crate::report::{Better, Report, Row, Source};
use crate::sampling::{GpuTimer, Plan};
use crate::sgemm::{pseudo_random, RawBlas};

/// Runs case 16.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
    // cuBLAS is reported rather than a panic of cudarc's lazy loader.
    if !unsafe { blas_sys::is_culib_present() } {
        rep.note("membound: cuBLAS (libcublas) could not be loaded; nothing was measured");
        return Ok(());
    }
    let len = env.cfg.pick(64 << 20, 4 << 20);
    let (warmup, reps) = env.cfg.pick((3, 20), (1, 5));
    let x = pseudo_random(len, 5);
    let y = pseudo_random(len, 6);
    let bytes = len * std::mem::size_of::<f32>();
    let n = i32::try_from(len).map_err(|_| Error::msg("membound: length exceeds i32::MAX"))?;

    // Ours: `DeviceVec`s attached to a scope per sample.
    let (dx, mut dy) = (env.dev.upload_vec(&x)?, env.dev.upload_vec(&y)?);
    let mut dot_out = env.dev.alloc_vec::<f32>(1)?;
    let timer = OurTimer::new(&env.dev)?;
    let ours_axpy = |len: usize| -> Result<f64> {
        scope(&env.streams[0], |s| {
            let (x, mut y) = (s.attach_ref(&dx)?, s.attach(&mut dy)?);
            let (x, mut y) = (x.slice(..len)?, y.slice_mut(..len)?);
            timer.start(s)?;
            kernels::axpy(s, 1e-3, &x, &mut y)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    };

    // Raw: cuBLAS on a raw stream, its scalars read from host (axpy) and its dot written
    // to device memory (no host round trip inside the timed span).
    let stream = env.raw_streams[0].0;
    let (rx, ry) = (RawDeviceMem::upload(&x)?, RawDeviceMem::upload(&y)?);
    let (r_out, r_copy) = (RawDeviceMem::new(4)?, RawDeviceMem::new(bytes)?);
    let handle = RawBlas(blas::create_handle()?);
    // SAFETY: the handle was just created; the stream is alive (owned by `Env`).
    unsafe { blas::set_stream(handle.0, stream as _) }?;
    let raw_timer = GpuTimer::new()?;
    let timed = |call: &dyn Fn() -> Result<()>| timed(&raw_timer, stream, call);
    let raw_axpy = |part: usize| {
        let n = i32::try_from(part).map_err(|_| Error::msg("membound: length exceeds i32::MAX"))?;
        timed(&|| {
            set_pointer_mode(
                &handle,
                blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST,
            )?;
            let alpha = 1e-3f32;
            // SAFETY: `rx` and `ry` hold `n` floats and stay allocated until `timed`
            // synchronised the stream; `alpha` is read before the call returns (host
            // pointer mode).
            unsafe {
                blas_sys::cublasSaxpy_v2(
                    handle.0,
                    n,
                    &raw const alpha,
                    rx.ptr as *const f32,
                    1,
                    ry.ptr as *mut f32,
                    1,
                )
            }
            .result()
            .map_err(|e| Error::msg(format!("cublasSaxpy_v2: {e:?}")))
        })
    };
    let plan = env.cfg.plan(warmup, reps);
    let lengths = [len, len / 4];
    let raw = ("raw cublasSaxpy_v2", raw_axpy);
    for row in rows_at(plan, &lengths, ("axpy f32", 12.0), raw, ours_axpy)? {
        rep.push(row);
    }

    // `kernels::fill` against the driver's `cuMemsetD32Async` (4 bytes written an
    // element), at both lengths; ours is checked after.
    let ours_fill = |len: usize| -> Result<f64> {
        scope(&env.streams[0], |s| {
            let mut y = s.attach(&mut dy)?;
            let mut y = y.slice_mut(..len)?;
            timer.start(s)?;
            kernels::fill(s, &mut y, 0.5f32)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    };
    let raw_fill = |len: usize| {
        timed(&|| {
            // SAFETY: `ry` holds `len` floats or more, allocated until `timed`
            // synchronised the stream.
            unsafe { sys::cuMemsetD32Async(ry.ptr, 0.5f32.to_bits(), len, stream) }
                .result()
                .context("cuMemsetD32Async")
        })
    };
    let raw = ("raw cuMemsetD32Async", raw_fill);
    for row in rows_at(plan, &lengths, ("fill f32", 4.0), raw, ours_fill)? {
        rep.push(row);
    }
    if let Some(i) = dy.to_host_vec()?.iter().position(|&v| v != 0.5) {
        return Err(Error::msg(format!(
            "membound: ours fill left element {i} unset"
        )));
    }

    // Fresh inputs for the dot products (the axpy samples changed y).
    let (dx, dy) = (env.dev.upload_vec(&x)?, env.dev.upload_vec(&y)?);
    // SAFETY: `ry` holds as many bytes as `y`; no work of the raw stream is pending
    // (`timed` synchronised it).
    unsafe { result::memcpy_htod_sync(ry.ptr, &y) }.context("cuMemcpyHtoD")?;
    let ours_dot = || -> Result<f64> {
        scope(&env.streams[0], |s| {
            let (x, y, mut out) = (
                s.attach_ref(&dx)?,
                s.attach_ref(&dy)?,
                s.attach(&mut dot_out)?,
            );
            timer.start(s)?;
            kernels::dot(s, &x, &y, &mut out)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    };
    let raw_dot = || {
        timed(&|| {
            set_pointer_mode(
                &handle,
                blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE,
            )?;
            // SAFETY: `rx` and `ry` hold `n` floats and `r_out` one, all allocated until
            // `timed` synchronised the stream (device pointer mode: the result is written
            // there by the stream's work).
            unsafe {
                blas_sys::cublasSdot_v2(
                    handle.0,
                    n,
                    rx.ptr as *const f32,
                    1,
                    ry.ptr as *const f32,
                    1,
                    r_out.ptr as *mut f32,
                )
            }
            .result()
            .map_err(|e| Error::msg(format!("cublasSdot_v2: {e:?}")))
        })
    };
    rep.push(gb_per_s_row(
        env.cfg.plan(warmup, reps),
        format!("dot f32, {} Mi elements", len >> 20),
        8.0 * len as f64,
        ("raw cublasSdot_v2", raw_dot),
        ours_dot,
    )?);

    let mut copies = Vec::with_capacity(warmup + reps);
    for _ in 0..warmup + reps {
        copies.push(timed(&|| {
            // SAFETY: both allocations hold `bytes` bytes, allocated until `timed`
            // synchronised the stream; distinct allocations.
            unsafe { result::memcpy_dtod_async(r_copy.ptr, rx.ptr, bytes, stream) }
                .context("cuMemcpyDtoDAsync")
        })?);
    }
    copies.drain(..warmup);
    copies.sort_by(f64::total_cmp);
    let median = copies[copies.len() / 2];
    rep.note(format!(
        "membound: a device-to-device copy of the same {} Mi f32 (cuMemcpyDtoDAsync) moves {:.0} \
         GB/s (read and write), the ceiling of the rows above",
        len >> 20,
        8.0 * len as f64 / median / 1e9
    ));

    let want: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    let scale: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| f64::from(a * b).abs())
        .sum();
    let ours = f64::from(dot_out.to_host_vec()?[0]);
    let mut theirs = [0f32];
    // SAFETY: `r_out` holds one float; the raw stream was synchronised.
    unsafe { result::memcpy_dtoh_sync(&mut theirs, r_out.ptr) }.context("cuMemcpyDtoH")?;
    // Pairwise summation in f32: about log2(n) roundings of the sum of |x y|.
    let bound = 2.0 * (len as f64).log2() * f64::from(f32::EPSILON) * scale;
    for (who, got) in [("ours", ours), ("cuBLAS", f64::from(theirs[0]))] {
        if (got - want).abs() > bound {
            return Err(Error::msg(format!(
                "membound: {who} dot is {got}, the f64 sum {want} (bound {bound:.3e})"
            )));
        }
    }
    transpose(env, rep, &handle, (warmup, reps))
}

/// A row of GB/s (`bytes` a call moves over its GPU seconds) measured by `plan`: ours
/// against the raw side named `raw.0`, with the design's goal of 0.95x raw or better.
fn gb_per_s_row<'a>(
    plan: Plan,
    what: String,
    bytes: f64,
    raw: (&'static str, impl FnMut() -> Result<f64> + 'a),
    ours: impl FnMut() -> Result<f64> + 'a,
) -> Result<Row> {
    let row = Measurement::new()
        .ours("ours", ours)
        .raw(raw.0, raw.1)
        .into_row(plan, Row::new("membound", what, "GB/s", Better::Higher))?
        .in_unit(|t| bytes / t / 1e9);
    Ok(row.check_vs_raw(0.95, Source::Goal))
}

/// A [`gb_per_s_row`] of `what` (moving `bytes_per_element` bytes an element) at each of
/// `lengths`: the whole vectors and a quarter of them, where the launch shape (elements
/// per thread) shows. `raw` is the raw side's name and its sampler.
fn rows_at(
    plan: Plan,
    lengths: &[usize],
    (what, bytes_per_element): (&str, f64),
    (raw_name, mut raw): (&'static str, impl FnMut(usize) -> Result<f64>),
    mut ours: impl FnMut(usize) -> Result<f64>,
) -> Result<Vec<Row>> {
    lengths
        .iter()
        .map(|&part| {
            gb_per_s_row(
                plan,
                format!("{what}, {} Mi elements", part >> 20),
                bytes_per_element * part as f64,
                (raw_name, || raw(part)),
                || ours(part),
            )
        })
        .collect()
}

/// Where `handle`'s calls read their scalars and write their results: host or device.
fn set_pointer_mode(handle: &RawBlas, mode: blas_sys::cublasPointerMode_t) -> Result<()> {
    // SAFETY: the handle is alive (borrowed) and used by this thread alone.
    unsafe { blas_sys::cublasSetPointerMode_v2(handle.0, mode) }
        .result()
        .map_err(|e| Error::msg(format!("cublasSetPointerMode: {e:?}")))
}

/// GPU seconds of `call`'s work on the raw `stream`, synchronised after.
fn timed(timer: &GpuTimer, stream: sys::CUstream, call: &dyn Fn() -> Result<()>) -> Result<f64> {
    timer.start(stream)?;
    let called = call();
    let stopped = timer.stop(stream);
    // SAFETY: the stream is alive (owned by `Env`).
    unsafe { result::stream::synchronize(stream) }.context("cuStreamSynchronize")?;
    called?;
    stopped?;
    timer.seconds()
}

/// The transpose of a square `f32` matrix (8192^2, 256 MiB): ours (`kernels::transpose`)
/// against raw `cublasSgeam` (`C = A^T`), as GB/s of the 8 bytes an element moves; both
/// outputs must equal the CPU's transpose.
fn transpose(
    env: &Env,
    rep: &mut Report,
    handle: &RawBlas,
    (warmup, reps): (usize, usize),
) -> Result<()> {
    let side = env.cfg.pick(8192, 2048);
    let len = side * side;
    let a = pseudo_random(len, 7);
    let d = i32::try_from(side).map_err(|_| Error::msg("membound: side exceeds i32::MAX"))?;
    let n = side as u32;

    let da = env.dev.upload_vec(&a)?;
    let mut dt = env.dev.alloc_vec::<f32>(len)?;
    let timer = OurTimer::new(&env.dev)?;
    let ours = || -> Result<f64> {
        scope(&env.streams[0], |s| {
            let (a, mut t) = (s.attach_ref(&da)?, s.attach(&mut dt)?);
            timer.start(s)?;
            kernels::transpose(s, &a, n, n, &mut t)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    };

    let stream = env.raw_streams[0].0;
    let (ra, rt) = (RawDeviceMem::upload(&a)?, RawDeviceMem::new(len * 4)?);
    set_pointer_mode(
        handle,
        blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST,
    )?;
    let raw_timer = GpuTimer::new()?;
    let raw = || {
        timed(&raw_timer, stream, &|| {
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: `ra` and `rt` hold `side * side` floats, allocated until `timed`
            // synchronised the stream; distinct allocations (no in-place geam). `alpha`
            // and `beta` are read before the call returns (host pointer mode); with
            // `beta` zero the second operand (`ra` again, valid) adds nothing.
            unsafe {
                blas_sys::cublasSgeam(
                    handle.0,
                    blas_sys::cublasOperation_t::CUBLAS_OP_T,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    d,
                    d,
                    &raw const alpha,
                    ra.ptr as *const f32,
                    d,
                    &raw const beta,
                    ra.ptr as *const f32,
                    d,
                    rt.ptr as *mut f32,
                    d,
                )
            }
            .result()
            .map_err(|e| Error::msg(format!("cublasSgeam: {e:?}")))
        })
    };
    rep.push(gb_per_s_row(
        env.cfg.plan(warmup, reps),
        format!("transpose f32, {side}x{side}"),
        8.0 * len as f64,
        ("raw cublasSgeam", raw),
        ours,
    )?);

    let ours = dt.to_host_vec()?;
    let mut theirs = vec![0f32; len];
    // SAFETY: `rt` holds `len` floats; the raw stream was synchronised.
    unsafe { result::memcpy_dtoh_sync(&mut theirs, rt.ptr) }.context("cuMemcpyDtoH")?;
    for (who, t) in [("ours", &ours), ("cuBLAS", &theirs)] {
        let wrong = (0..len).find(|&i| t[i].to_bits() != a[(i % side) * side + i / side].to_bits());
        if let Some(i) = wrong {
            return Err(Error::msg(format!(
                "membound: {who} transpose differs from the CPU's at element {i}"
            )));
        }
    }
    Ok(())
}
