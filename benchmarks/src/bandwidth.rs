//! Case 2: pinned host-to-device and device-to-host bandwidth, GPU time of one copy
//! between two events on the copying stream.
//!
//! Each implementation copies between its own page-locked host memory (portable, not
//! write-combined, for all three) and its own device memory of the same size: ours a
//! `PinnedBuffer` and a `DeviceVec` attached to a scope per sample, raw `cuMemHostAlloc`
//! and `cuMemAlloc`, cudarc a `PinnedHostSlice` and a `CudaSlice`.
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaSlice, CudaStream, PinnedHostSlice};
use stream_core::{scope, DeviceVec, PinnedBuffer, Stream};

use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{RawDeviceMem, RawPinned};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::GpuTimer;

/// Runs case 2.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let sizes: &[(usize, usize, usize)] = if env.cfg.quick {
        &[(64 * MIB, 1, 5)]
    } else {
        // (bytes, warm-up samples, samples)
        &[(64 * MIB, 3, 25), (1024 * MIB, 1, 7)]
    };
    for &(bytes, warmup, reps) in sizes {
        let n = bytes / 4;
        let mut ours = Ours::new(env, n)?;
        let mut raw = Raw::new(env, n)?;
        let mut cu1 = Cudarc::new(env.cu1.clone(), n)?;
        let mut cu2 = Cudarc::new(env.cu2[0].clone(), n)?;
        for up in [true, false] {
            let dir = if up {
                "host-to-device"
            } else {
                "device-to-host"
            };
            let row = Measurement::new()
                .ours("ours", || ours.copy(up))
                .raw("raw", || raw.copy(up))
                .cudarc1("cudarc, default stream", || cu1.copy(up))
                .cudarc2("cudarc, own stream", || cu2.copy(up))
                .into_row(
                    env.cfg.plan(warmup, reps),
                    Row::new(
                        "bandwidth",
                        format!("pinned {dir}, {} MiB", bytes / MIB),
                        "GB/s",
                        Better::Higher,
                    ),
                )?
                .in_unit(|t| bytes as f64 / t / 1e9);
            rep.push(row.check_vs_raw(0.98, Source::Issue));
        }
    }
    Ok(())
}

/// This library: a scope per sample, the device memory a `DeviceVec` attached to it.
struct Ours<'e> {
    stream: &'e Stream,
    host: PinnedBuffer<f32>,
    device: DeviceVec<f32>,
    timer: stream_core::GpuTimer,
}

impl<'e> Ours<'e> {
    fn new(env: &'e Env, n: usize) -> Result<Self> {
        let mut host = env.dev.alloc_pinned::<f32>(n)?;
        host.fill(1.0);
        Ok(Ours {
            stream: &env.streams[0],
            host,
            device: env.dev.alloc_vec::<f32>(n)?,
            timer: stream_core::GpuTimer::new(&env.dev)?,
        })
    }

    fn copy(&mut self, up: bool) -> Result<f64> {
        let Ours {
            stream,
            host,
            device,
            timer,
        } = self;
        scope(stream, |s| {
            let mut d = s.attach(device)?;
            timer.start(s)?;
            if up {
                s.copy_to_device(&host[..], &mut d)?;
            } else {
                let _download = s.copy_to_host(&d, &mut host[..])?;
            }
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    }
}

/// Raw driver calls: `cuMemcpyHtoDAsync`/`cuMemcpyDtoHAsync` on a raw stream.
struct Raw {
    stream: sys::CUstream,
    host: RawPinned,
    device: RawDeviceMem,
    timer: GpuTimer,
}

impl Raw {
    fn new(env: &Env, n: usize) -> Result<Self> {
        let mut host = RawPinned::new(n)?;
        host.as_mut_slice().fill(1.0);
        Ok(Raw {
            stream: env.raw_streams[0].0,
            host,
            device: RawDeviceMem::new(n * 4)?,
            timer: GpuTimer::new()?,
        })
    }

    fn copy(&mut self, up: bool) -> Result<f64> {
        self.timer.start(self.stream)?;
        let copied = if up {
            // SAFETY: `device` holds as many bytes as `host`; `host` is page-locked and
            // stays alive and untouched until the stream is synchronised below.
            unsafe { result::memcpy_htod_async(self.device.ptr, self.host.as_slice(), self.stream) }
                .context("cuMemcpyHtoDAsync")
        } else {
            // SAFETY: as above; nothing reads `host` before the synchronisation.
            unsafe {
                result::memcpy_dtoh_async(self.host.as_mut_slice(), self.device.ptr, self.stream)
            }
            .context("cuMemcpyDtoHAsync")
        };
        let stopped = self.timer.stop(self.stream);
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(self.stream) }.context("cuStreamSynchronize")?;
        copied?;
        stopped?;
        self.timer.seconds()
    }
}

/// cudarc's safe API: `memcpy_htod`/`memcpy_dtoh` between a `PinnedHostSlice` and a
/// `CudaSlice`.
struct Cudarc {
    stream: Arc<CudaStream>,
    host: PinnedHostSlice<f32>,
    device: CudaSlice<f32>,
    timer: GpuTimer,
}

impl Cudarc {
    fn new(stream: Arc<CudaStream>, n: usize) -> Result<Self> {
        // Portable and not write-combined, like the others (cudarc's `alloc_pinned`
        // would make it write-combined).
        // SAFETY: the memory is uninitialised until the `fill` below, and nothing reads
        // it before.
        let mut host = unsafe {
            stream
                .context()
                .alloc_pinned_with_flags::<f32>(n, sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .context("cudarc: alloc_pinned_with_flags")?;
        host.as_mut_slice()
            .context("cudarc: as_mut_slice")?
            .fill(1.0);
        let device = stream
            .alloc_zeros::<f32>(n)
            .context("cudarc: alloc_zeros")?;
        stream.synchronize().context("cudarc: synchronize")?;
        Ok(Cudarc {
            stream,
            host,
            device,
            timer: GpuTimer::new()?,
        })
    }

    fn copy(&mut self, up: bool) -> Result<f64> {
        let raw = self.stream.cu_stream();
        self.timer.start(raw)?;
        let copied = if up {
            self.stream
                .memcpy_htod(&self.host, &mut self.device)
                .context("cudarc: memcpy_htod")
        } else {
            self.stream
                .memcpy_dtoh(&self.device, &mut self.host)
                .context("cudarc: memcpy_dtoh")
        };
        let stopped = self.timer.stop(raw);
        self.stream.synchronize().context("cudarc: synchronize")?;
        copied?;
        stopped?;
        self.timer.seconds()
    }
}
