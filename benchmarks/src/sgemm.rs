//! Case 7: SGEMM at 4096^3 (row-major `C = A B`), GPU time of one call between two
//! events, as GFLOP/s: the `kernels` crate's tiled kernel and cuBLAS, each through this
//! library (`kernels::sgemm_tiled`, `kernels::Cublas`), raw calls (`cuLaunchKernel` of
//! the same CUBIN, `cublasSgemm` on a raw stream) and cudarc's safe API
//! (`launch_builder`, `CudaBlas` + `Gemm`). Results are checked against each other and
//! against an f64 CPU reference at sampled entries. Then the host cost of enqueuing
//! small cuBLAS GEMMs ([`crate::sgemm_enqueue`]).
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{result, sys, CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use cudarc::nvrtc::Ptx;
use stream_core::{scope, DeviceVec, LaunchConfig, Stream};

use crate::cuda::{self, SGEMM_SOURCE};
use crate::error::{Context, Error, Result};
use crate::measure::{interleaved, GpuTimer, Sampler};
use crate::raw::{arg, RawDeviceMem, RawModule};
use crate::report::{Better, Report, Row, Source};
use crate::rounds::Rounds;
use crate::Env;

/// Runs case 7.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let size = env.cfg.pick(4096usize, 1024);
    let (warmup, reps) = env.cfg.pick((2, 10), (1, 3));
    // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
    // cuBLAS is reported rather than a panic of cudarc's lazy loader.
    let have_cublas = unsafe { blas_sys::is_culib_present() };
    let a = pseudo_random(size * size, 1);
    let b = pseudo_random(size * size, 2);
    let cubin = cuda::compile_cubin(SGEMM_SOURCE, env.dev.compute_capability())
        .context("compiling the tiled SGEMM for the raw and cudarc baselines")?;

    let mut ours = Ours::new(env, &a, &b, have_cublas)?;
    let mut raw = Raw::new(env, &cubin, &a, &b, have_cublas)?;
    let mut cu1 = Cudarc::new(env.cu1.clone(), &cubin, &a, &b, have_cublas)?;
    let mut cu2 = Cudarc::new(env.cu2[0].clone(), &cubin, &a, &b, have_cublas)?;
    let flops = 2.0 * (size as f64).powi(3);
    let to_gflops = |s: &Rounds| s.map(|t| flops / t / 1e9);

    let kinds: &[bool] = if have_cublas {
        &[false, true]
    } else {
        &[false]
    };
    let mut medians = Vec::new();
    for &use_blas in kinds {
        let stats = {
            let mut samplers: Vec<Sampler<'_>> = vec![
                ("ours", Box::new(|| ours.sgemm(size, use_blas))),
                ("raw", Box::new(|| raw.sgemm(size, use_blas))),
                (
                    "cudarc, default stream",
                    Box::new(|| cu1.sgemm(size, use_blas)),
                ),
                ("cudarc, own stream", Box::new(|| cu2.sgemm(size, use_blas))),
            ];
            interleaved(env.cfg.plan(warmup, reps), &mut samplers)?
        };
        let g: Vec<Rounds> = stats.iter().map(to_gflops).collect();
        let [o, r, c1, c2]: [Rounds; 4] = g
            .try_into()
            .map_err(|_| Error::msg("sgemm: expected four results"))?;
        medians.push(o.median());
        let what = if use_blas { "cuBLAS" } else { "tiled" };
        let mut row = Row::new(
            "sgemm",
            format!("{what} SGEMM {size}^3"),
            "GFLOP/s",
            Better::Higher,
        );
        (row.ours, row.raw, row.cudarc1, row.cudarc2) = (Some(o), Some(r), Some(c1), Some(c2));
        rep.push(row.check_vs_raw(0.98, Source::Goal));

        let results = [
            ("ours", ours.result(use_blas)?),
            ("raw", raw.result(use_blas)?),
            ("cudarc, default stream", cu1.result(use_blas)?),
            ("cudarc, own stream", cu2.result(use_blas)?),
        ];
        for (who, c) in &results {
            check_against_cpu(&format!("{who} {what}"), c, &a, &b, size)?;
        }
        if !use_blas {
            for (who, c) in &results[1..] {
                if c != &results[0].1 {
                    return Err(Error::msg(format!(
                        "{who}: the tiled SGEMM's result differs from ours (same kernel, same inputs)"
                    )));
                }
            }
        }
    }
    if let [tiled, blas] = medians[..] {
        rep.figure("sgemm", "ours: tiled / cuBLAS", 100.0 * tiled / blas, "%");
        crate::sgemm_enqueue::run(env, rep)?;
    } else {
        rep.note(
            "sgemm: cuBLAS (libcublas) could not be loaded; only the tiled kernel was measured",
        );
    }
    Ok(())
}

/// Uniform values in [-0.5, 0.5) from a xorshift generator.
fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// 64 sampled entries of `c` agree with an f64 reference within a bound that covers
/// f32 rounding of a length-`size` dot product (and TF32, should cuBLAS use it).
fn check_against_cpu(who: &str, c: &[f32], a: &[f32], b: &[f32], size: usize) -> Result<()> {
    if c.len() != size * size {
        return Err(Error::msg(format!(
            "{who}: result has {} elements",
            c.len()
        )));
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let (i, j) = ((state as usize) % size, ((state >> 32) as usize) % size);
        let (mut exact, mut magnitude) = (0f64, 0f64);
        for p in 0..size {
            let term = f64::from(a[i * size + p]) * f64::from(b[p * size + j]);
            exact += term;
            magnitude += term.abs();
        }
        let got = f64::from(c[i * size + j]);
        if (got - exact).abs() > 1e-3 * magnitude + 1e-6 {
            return Err(Error::msg(format!(
                "{who}: C[{i}][{j}] is {got} but the CPU computes {exact}"
            )));
        }
    }
    Ok(())
}

/// The tiled kernel's launch shape (as `kernels::sgemm_tiled` launches it).
fn tiled_config(size: usize) -> LaunchConfig {
    kernels::sgemm_tiled_config(size as u32, size as u32)
}

/// This library: `DeviceVec`s attached to a scope per sample.
struct Ours<'e> {
    stream: &'e Stream,
    a: DeviceVec<f32>,
    b: DeviceVec<f32>,
    c_tiled: DeviceVec<f32>,
    c_blas: DeviceVec<f32>,
    blas: Option<kernels::Cublas>,
    timer: stream_core::GpuTimer,
}

impl<'e> Ours<'e> {
    fn new(env: &'e Env, a: &[f32], b: &[f32], have_cublas: bool) -> Result<Self> {
        Ok(Ours {
            stream: &env.streams[0],
            a: env.dev.upload_vec(a)?,
            b: env.dev.upload_vec(b)?,
            c_tiled: env.dev.alloc_vec(a.len())?,
            c_blas: env.dev.alloc_vec(a.len())?,
            blas: if have_cublas {
                Some(kernels::Cublas::new(&env.dev)?)
            } else {
                None
            },
            timer: stream_core::GpuTimer::new(&env.dev)?,
        })
    }

    fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        let n = size as u32;
        let Ours {
            stream,
            a,
            b,
            c_tiled,
            c_blas,
            blas,
            timer,
        } = self;
        scope(stream, |s| {
            let (da, db) = (s.attach_ref(a)?, s.attach_ref(b)?);
            timer.start(s)?;
            match (use_blas, blas.as_mut()) {
                (false, _) => {
                    let mut dc = s.attach(c_tiled)?;
                    kernels::sgemm_tiled(s, n, n, n, 1.0, &da, &db, 0.0, &mut dc)?;
                }
                (true, Some(blas)) => {
                    let mut dc = s.attach(c_blas)?;
                    blas.sgemm(s, n, n, n, 1.0, &da, &db, 0.0, &mut dc)?;
                }
                (true, None) => return Err(Error::msg("cuBLAS is not loaded")),
            }
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    }

    fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
        Ok(if use_blas {
            &self.c_blas
        } else {
            &self.c_tiled
        }
        .to_host_vec()?)
    }
}

/// Row-major `c = a b` of square `size x size` matrices through raw `cublasSgemm` on the
/// handle's stream (as column-major `C^T = B^T A^T`: the operands swapped).
///
/// # Safety
///
/// `a`, `b` and `c` hold `size * size` floats each and stay allocated until the handle's
/// stream has run the call.
pub unsafe fn raw_square_sgemm(
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
pub fn square_gemm_config(size: usize) -> GemmConfig<f32> {
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
struct RawBlas(blas_sys::cublasHandle_t);

impl Drop for RawBlas {
    fn drop(&mut self) {
        // SAFETY: created by `create_handle`, destroyed once; its work was synchronised.
        let _ = unsafe { blas::destroy_handle(self.0) };
    }
}

/// Raw calls: `cuLaunchKernel` of the tiled kernel, `cublasSgemm` with a handle bound to
/// the raw stream.
struct Raw {
    stream: sys::CUstream,
    _module: RawModule,
    function: sys::CUfunction,
    a: RawDeviceMem,
    b: RawDeviceMem,
    c_tiled: RawDeviceMem,
    c_blas: RawDeviceMem,
    blas: Option<RawBlas>,
    timer: GpuTimer,
}

impl Raw {
    fn new(env: &Env, cubin: &[u8], a: &[f32], b: &[f32], have_cublas: bool) -> Result<Self> {
        let module = RawModule::load(cubin)?;
        let function = module.function("sgemm_tiled")?;
        let upload = |host: &[f32]| -> Result<RawDeviceMem> {
            let m = RawDeviceMem::new(host.len() * 4)?;
            // SAFETY: `m` holds as many bytes as `host`.
            unsafe { result::memcpy_htod_sync(m.ptr, host) }.context("cuMemcpyHtoD")?;
            Ok(m)
        };
        let stream = env.raw_streams[0].0;
        let blas = if have_cublas {
            let h = RawBlas(blas::create_handle()?);
            // SAFETY: the handle was just created; the stream is alive (owned by `Env`).
            unsafe { blas::set_stream(h.0, stream as _) }?;
            Some(h)
        } else {
            None
        };
        Ok(Raw {
            stream,
            _module: module,
            function,
            a: upload(a)?,
            b: upload(b)?,
            c_tiled: RawDeviceMem::new(a.len() * 4)?,
            c_blas: RawDeviceMem::new(a.len() * 4)?,
            blas,
            timer: GpuTimer::new()?,
        })
    }

    fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        self.timer.start(self.stream)?;
        let launched = self.launch(size, use_blas);
        let stopped = self.timer.stop(self.stream);
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(self.stream) }.context("cuStreamSynchronize")?;
        launched?;
        stopped?;
        self.timer.seconds()
    }

    fn launch(&self, size: usize, use_blas: bool) -> Result<()> {
        let (n, len) = (size as u32, size * size);
        let (alpha, beta) = (1.0f32, 0.0f32);
        if use_blas {
            let h = self
                .blas
                .as_ref()
                .ok_or_else(|| Error::msg("cuBLAS is not loaded"))?;
            // SAFETY: the three buffers hold `size * size` floats each; the handle's
            // stream is the raw stream, synchronised before the buffers are freed.
            unsafe { raw_square_sgemm(h.0, size, &self.a, &self.b, &self.c_blas) }?;
            return Ok(());
        }
        let cfg = tiled_config(size);
        let mut args = [
            arg(&n),
            arg(&n),
            arg(&n),
            arg(&alpha),
            arg(&self.a.ptr),
            arg(&len),
            arg(&self.b.ptr),
            arg(&len),
            arg(&beta),
            arg(&self.c_tiled.ptr),
            arg(&len),
        ];
        // SAFETY: `sgemm_tiled(unsigned m, n, k, float alpha, const float* a, size_t,
        // const float* b, size_t, float beta, float* c, size_t)` gets three buffers of
        // `len` floats and their lengths.
        unsafe {
            result::launch_kernel(
                self.function,
                cfg.grid,
                cfg.block,
                0,
                self.stream,
                &mut args,
            )
        }
        .context("cuLaunchKernel")
    }

    fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
        let src = if use_blas {
            &self.c_blas
        } else {
            &self.c_tiled
        };
        let mut out = vec![0f32; src.bytes / 4];
        // SAFETY: `src` holds `out.len()` floats; its stream was synchronised.
        unsafe { result::memcpy_dtoh_sync(&mut out, src.ptr) }.context("cuMemcpyDtoH")?;
        Ok(out)
    }
}

/// cudarc's safe API: `launch_builder` and `CudaBlas`.
struct Cudarc {
    stream: Arc<CudaStream>,
    function: CudaFunction,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c_tiled: CudaSlice<f32>,
    c_blas: CudaSlice<f32>,
    blas: Option<CudaBlas>,
    timer: GpuTimer,
}

impl Cudarc {
    fn new(
        stream: Arc<CudaStream>,
        cubin: &[u8],
        a: &[f32],
        b: &[f32],
        have_cublas: bool,
    ) -> Result<Self> {
        let module = stream
            .context()
            .load_module(Ptx::from_binary(cubin.to_vec()))
            .context("cudarc: load_module")?;
        let function = module
            .load_function("sgemm_tiled")
            .context("cudarc: load_function")?;
        let blas = if have_cublas {
            Some(CudaBlas::new(stream.clone())?)
        } else {
            None
        };
        let ca = stream.clone_htod(a).context("cudarc: clone_htod")?;
        let cb = stream.clone_htod(b).context("cudarc: clone_htod")?;
        let c_tiled = stream.alloc_zeros(a.len()).context("cudarc: alloc_zeros")?;
        let c_blas = stream.alloc_zeros(a.len()).context("cudarc: alloc_zeros")?;
        stream.synchronize().context("cudarc: synchronize")?;
        Ok(Cudarc {
            stream,
            function,
            a: ca,
            b: cb,
            c_tiled,
            c_blas,
            blas,
            timer: GpuTimer::new()?,
        })
    }

    fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        let raw = self.stream.cu_stream();
        self.timer.start(raw)?;
        let launched = self.launch(size, use_blas);
        let stopped = self.timer.stop(raw);
        self.stream.synchronize().context("cudarc: synchronize")?;
        launched?;
        stopped?;
        self.timer.seconds()
    }

    fn launch(&mut self, size: usize, use_blas: bool) -> Result<()> {
        let (n, len) = (size as u32, size * size);
        if use_blas {
            let h = self
                .blas
                .as_ref()
                .ok_or_else(|| Error::msg("cuBLAS is not loaded"))?;
            // Row-major C = A B is column-major C^T = B^T A^T: swap the operands.
            // SAFETY: the three buffers hold `size * size` floats each.
            unsafe { h.gemm(square_gemm_config(size), &self.b, &self.a, &mut self.c_blas) }?;
            return Ok(());
        }
        let cfg = cuda::to_cudarc(tiled_config(size));
        let mut l = self.stream.launch_builder(&self.function);
        l.arg(&n)
            .arg(&n)
            .arg(&n)
            .arg(&1.0f32)
            .arg(&self.a)
            .arg(&len)
            .arg(&self.b)
            .arg(&len)
            .arg(&0.0f32)
            .arg(&mut self.c_tiled)
            .arg(&len);
        // SAFETY: `sgemm_tiled` gets three buffers of `len` floats and their lengths.
        unsafe { l.launch(cfg) }.context("cudarc: launch")?;
        Ok(())
    }

    fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
        let src = if use_blas {
            &self.c_blas
        } else {
            &self.c_tiled
        };
        let out = self.stream.clone_dtoh(src).context("cudarc: clone_dtoh")?;
        self.stream.synchronize().context("cudarc: synchronize")?;
        Ok(out)
    }
}
