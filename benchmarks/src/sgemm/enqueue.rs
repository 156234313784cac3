//! Part of case 7: the host cost of enqueuing small cuBLAS GEMMs, per call: this
//! library's `kernels::Cublas::sgemm` (in a scope, on a stream of its own that lends the
//! call its workspace), raw `cublasSgemm` on a handle bound once to a raw stream, and
//! cudarc's `CudaBlas` + `Gemm` on its two kinds of stream.
//!
//! [`CALLS`] GEMMs of [`SIZE`]^3 are enqueued back to back; the host time of that loop
//! is the sample (the synchronisation that follows is not timed). At this size the GPU
//! keeps up with the host, so the loop measures what each call costs the host.
//!
//! Target (the design's goal): ours at most 1.03x raw.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas, Gemm};
use cudarc::driver::{result, CudaSlice, CudaStream};
use stream_core::{scope, DeviceVec, Stream};

use super::square::{raw_square_sgemm, square_gemm_config};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{RawDeviceMem, RawStream};
use crate::report::{Better, Report, Row, Source};

/// Rows and columns of the square matrices.
const SIZE: usize = 256;
/// GEMMs per sample.
const CALLS: usize = 100;

/// Measures the enqueue cost of one small GEMM (cuBLAS must be loaded).
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((3, 30), (1, 5));
    let elements = SIZE * SIZE;
    let ones = vec![1.0f32; elements];

    // Ours: a stream of its own, so that its workspace and its handle's exposure are
    // this row's alone.
    let stream = env.dev.new_stream()?;
    let mut ours = Ours {
        stream: &stream,
        blas: kernels::Cublas::new(&env.dev)?,
        a: env.dev.upload_vec(&ones)?,
        b: env.dev.upload_vec(&ones)?,
        c: env.dev.alloc_vec(elements)?,
    };
    let raw = Raw::new(&ones)?;
    let mut cu1 = Cudarc::new(env.cu1.clone(), &ones)?;
    let mut cu2 = Cudarc::new(env.cu2[0].clone(), &ones)?;

    let row = Measurement::new()
        .ours("ours", || ours.calls())
        .raw("raw", || raw.calls())
        .cudarc1("cudarc, default stream", || cu1.calls())
        .cudarc2("cudarc, own stream", || cu2.calls())
        .into_row(
            env.cfg.plan(warmup, reps),
            Row::new(
                "sgemm",
                format!("cuBLAS SGEMM {SIZE}^3: enqueue, {CALLS} calls back to back"),
                "ns/call",
                Better::Lower,
            ),
        )?;
    rep.push(row.check_vs_raw(1.03, Source::Goal));

    // Every implementation computed ones x ones: each entry is SIZE.
    let want = SIZE as f32;
    for (who, c) in [
        ("ours", ours.c.to_host_vec()?),
        ("raw", raw.result()?),
        ("cudarc, default stream", cu1.result()?),
        ("cudarc, own stream", cu2.result()?),
    ] {
        if let Some(bad) = c.iter().position(|&x| x != want) {
            return Err(Error::msg(format!(
                "sgemm enqueue: {who}: C[{bad}] is {} but ones x ones of size {SIZE} is {want}",
                c[bad]
            )));
        }
    }
    Ok(())
}

/// Nanoseconds per call since `t`.
fn per_call(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64 / CALLS as f64
}

/// This library: a scope per sample, the three matrices attached.
struct Ours<'e> {
    stream: &'e Stream,
    blas: kernels::Cublas,
    a: DeviceVec<f32>,
    b: DeviceVec<f32>,
    c: DeviceVec<f32>,
}

impl Ours<'_> {
    fn calls(&mut self) -> Result<f64> {
        let n = SIZE as u32;
        let Ours {
            stream,
            blas,
            a,
            b,
            c,
        } = self;
        scope(stream, |s| {
            let (da, db, mut dc) = (s.attach_ref(a)?, s.attach_ref(b)?, s.attach(c)?);
            let t = Instant::now();
            for _ in 0..CALLS {
                blas.sgemm(s, n, n, n, 1.0, &da, &db, 0.0, &mut dc)?;
            }
            Ok::<_, Error>(per_call(t))
        })
    }
}

/// Raw calls: a handle bound once to a raw stream of its own.
struct Raw {
    stream: RawStream,
    handle: blas_sys::cublasHandle_t,
    a: RawDeviceMem,
    b: RawDeviceMem,
    c: RawDeviceMem,
}

impl Raw {
    fn new(ones: &[f32]) -> Result<Self> {
        let upload = RawDeviceMem::upload::<f32>;
        let stream = RawStream::new()?;
        let handle = blas::create_handle()?;
        let raw = Raw {
            a: upload(ones)?,
            b: upload(ones)?,
            c: RawDeviceMem::new(ones.len() * 4)?,
            stream,
            handle,
        };
        // SAFETY: the handle was just created; the stream is alive (owned by `raw`).
        unsafe { blas::set_stream(raw.handle, raw.stream.0 as _) }?;
        Ok(raw)
    }

    fn calls(&self) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..CALLS {
            // SAFETY: the three buffers hold SIZE * SIZE floats each; the handle's
            // stream is the raw stream, synchronised below, before any buffer is freed.
            unsafe { raw_square_sgemm(self.handle, SIZE, &self.a, &self.b, &self.c) }?;
        }
        let ns = per_call(t);
        self.stream.sync()?;
        Ok(ns)
    }

    fn result(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.c.bytes / 4];
        // SAFETY: `c` holds `out.len()` floats; its stream was synchronised.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.c.ptr) }.context("cuMemcpyDtoH")?;
        Ok(out)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, here; its work was synchronised.
        let _ = unsafe { blas::destroy_handle(self.handle) };
    }
}

/// cudarc's safe API: `CudaBlas` on one of its streams.
struct Cudarc {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
}

impl Cudarc {
    fn new(stream: Arc<CudaStream>, ones: &[f32]) -> Result<Self> {
        let blas = CudaBlas::new(stream.clone())?;
        let a = stream.clone_htod(ones).context("cudarc: clone_htod")?;
        let b = stream.clone_htod(ones).context("cudarc: clone_htod")?;
        let c = stream
            .alloc_zeros(ones.len())
            .context("cudarc: alloc_zeros")?;
        stream.synchronize().context("cudarc: synchronize")?;
        Ok(Cudarc {
            stream,
            blas,
            a,
            b,
            c,
        })
    }

    fn calls(&mut self) -> Result<f64> {
        let cfg = square_gemm_config(SIZE);
        let t = Instant::now();
        for _ in 0..CALLS {
            // SAFETY: the three buffers hold SIZE * SIZE floats each.
            unsafe { self.blas.gemm(cfg, &self.b, &self.a, &mut self.c) }?;
        }
        let ns = per_call(t);
        self.stream.synchronize().context("cudarc: synchronize")?;
        Ok(ns)
    }

    fn result(&self) -> Result<Vec<f32>> {
        let out = self
            .stream
            .clone_dtoh(&self.c)
            .context("cudarc: clone_dtoh")?;
        self.stream.synchronize().context("cudarc: synchronize")?;
        Ok(out)
    }
}
