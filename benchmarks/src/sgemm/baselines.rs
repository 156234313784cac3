//! The baselines of the GFLOP/s rows: the same GEMMs through raw driver and cuBLAS
//! calls, and through cudarc's safe API.
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::cublas::{result as blas, CudaBlas, Gemm};
use cudarc::driver::{result, sys, CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use cudarc::nvrtc::Ptx;

use crate::cuda::{self};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::raw::{arg, RawDeviceMem, RawModule};
use crate::sampling::GpuTimer;

use super::square::tiled_config;
use super::square::{raw_square_sgemm, square_gemm_config, RawBlas};

/// Raw calls: `cuLaunchKernel` of the tiled kernel, `cublasSgemm` with a handle bound to
/// the raw stream.
pub(super) struct Raw {
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
    pub(super) fn new(
        env: &Env,
        cubin: &[u8],
        a: &[f32],
        b: &[f32],
        have_cublas: bool,
    ) -> Result<Self> {
        let module = RawModule::load(cubin)?;
        let function = module.function("sgemm_tiled")?;
        let upload = RawDeviceMem::upload::<f32>;
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

    pub(super) fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        self.timer.start(self.stream)?;
        let launched = self.launch(size, use_blas);
        let stopped = self.timer.stop(self.stream);
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(self.stream) }.context("cuStreamSynchronize")?;
        launched?;
        stopped?;
        self.timer.seconds()
    }

    pub(super) fn launch(&self, size: usize, use_blas: bool) -> Result<()> {
        let n = size as u32;
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
        self.launch_one_pass((n, n, n))
    }

    pub(super) fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
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

impl Raw {
    /// GPU time of the tiled kernel launched once, in one pass, on `(m, n, k)` (the
    /// leading parts of the square buffers; the square case's launch is this one's).
    pub(super) fn one_pass(&mut self, (m, n, k): (u32, u32, u32)) -> Result<f64> {
        self.timer.start(self.stream)?;
        let launched = self.launch_one_pass((m, n, k));
        let stopped = self.timer.stop(self.stream);
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(self.stream) }.context("cuStreamSynchronize")?;
        launched?;
        stopped?;
        self.timer.seconds()
    }

    fn launch_one_pass(&self, (m, n, k): (u32, u32, u32)) -> Result<()> {
        let cfg = kernels::sgemm_tiled_config(m, n);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let [a_len, b_len, c_len] = super::operand_lens((m, n, k));
        let mut args = [
            arg(&m),
            arg(&n),
            arg(&k),
            arg(&alpha),
            arg(&self.a.ptr),
            arg(&a_len),
            arg(&self.b.ptr),
            arg(&b_len),
            arg(&beta),
            arg(&self.c_tiled.ptr),
            arg(&c_len),
        ];
        // SAFETY: `sgemm_tiled(unsigned m, n, k, float alpha, const float* a, size_t,
        // const float* b, size_t, float beta, float* c, size_t)` gets the leading
        // `a_len`, `b_len`, `c_len` floats of buffers that hold more (checked by `split_k::run`).
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
}

/// cudarc's safe API: `launch_builder` and `CudaBlas`.
pub(super) struct Cudarc {
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
    pub(super) fn new(
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

    pub(super) fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        let raw = self.stream.cu_stream();
        self.timer.start(raw)?;
        let launched = self.launch(size, use_blas);
        let stopped = self.timer.stop(raw);
        self.stream.synchronize().context("cudarc: synchronize")?;
        launched?;
        stopped?;
        self.timer.seconds()
    }

    pub(super) fn launch(&mut self, size: usize, use_blas: bool) -> Result<()> {
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

    pub(super) fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
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
