//! Case 3: host-to-device copies from ordinary (pageable) `Vec` memory, host time from
//! the call to the end of the stream synchronisation that follows it (the driver may
//! return from a pageable copy before the data has landed, or block until it has: only
//! the time to "data on the device" is comparable).
//!
//! * ours: `s.copy_to_device(&vec, &mut buf)` in a scope; the library's path for
//!   pageable memory (staged through pinned blocks above a threshold, see
//!   `stream-core/src/staging.rs`).
//! * raw: `cuMemcpyHtoDAsync` from the same kind of `Vec`, and the same from pinned
//!   memory as the ceiling (a row of its own).
//! * cudarc: `memcpy_htod` from a `Vec` on its default stream.
#![allow(unsafe_code)]

use cudarc::driver::{result, sys, CudaSlice};
use stream_core::{scope, DeviceVec};

use crate::error::{Context, Error, Result};
use crate::measure::{interleaved, Sampler, Stats};
use crate::raw::{RawDeviceMem, RawPinned};
use crate::report::{Better, Report, Row, Source};
use crate::Env;

const MIB: usize = 1 << 20;

/// Runs case 3.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let sizes: &[(usize, usize, usize)] = if env.cfg.quick {
        &[(64 * MIB, 1, 3)]
    } else {
        &[(64 * MIB, 2, 15), (1024 * MIB, 1, 5)]
    };
    for &(bytes, warmup, reps) in sizes {
        let n = bytes / 4;
        // Distinct vectors, each written in full so that no page fault is timed.
        let ours_src: Vec<f32> = vec![1.0; n];
        let raw_src: Vec<f32> = vec![1.0; n];
        let cu_src: Vec<f32> = vec![1.0; n];
        let mut pinned = RawPinned::new(n)?;
        pinned.as_mut_slice().fill(1.0);

        let mut ours_dst: DeviceVec<f32> = env.dev.alloc_vec(n)?;
        let raw_dst = RawDeviceMem::new(bytes)?;
        let raw_pinned_dst = RawDeviceMem::new(bytes)?;
        let cu = &env.cu1;
        let mut cu_dst: CudaSlice<f32> = cu.alloc_zeros(n).context("cudarc: alloc_zeros")?;
        cu.synchronize().context("cudarc: synchronize")?;
        let ours_stream = &env.streams[0];
        let raw_stream = env.raw_streams[0].0;

        let stats = {
            let mut samplers: Vec<Sampler<'_>> = vec![
                (
                    "ours, pageable",
                    Box::new(|| {
                        let t = std::time::Instant::now();
                        scope(ours_stream, |s| {
                            let mut d = s.attach(&mut ours_dst)?;
                            s.copy_to_device(&ours_src, &mut d)?;
                            Ok::<_, Error>(())
                        })?;
                        Ok(t.elapsed().as_secs_f64())
                    }),
                ),
                (
                    "raw, pageable",
                    Box::new(|| raw_copy(raw_stream, raw_dst.ptr, &raw_src)),
                ),
                (
                    "cudarc, pageable",
                    Box::new(|| {
                        let t = std::time::Instant::now();
                        cu.memcpy_htod(&cu_src, &mut cu_dst)
                            .context("cudarc: memcpy_htod")?;
                        cu.synchronize().context("cudarc: synchronize")?;
                        Ok(t.elapsed().as_secs_f64())
                    }),
                ),
                (
                    "raw, pinned",
                    Box::new(|| raw_copy(raw_stream, raw_pinned_dst.ptr, pinned.as_slice())),
                ),
            ];
            interleaved(warmup, reps, &mut samplers)?
        };
        let gbs: Vec<Stats> = stats
            .iter()
            .map(|s| s.map(|t| bytes as f64 / t / 1e9))
            .collect();
        let [o, r, c, pin]: [Stats; 4] = gbs
            .try_into()
            .map_err(|_| Error::msg("pageable: expected four results"))?;
        let mut row = Row::new(
            "pageable",
            format!("pageable host-to-device, {} MiB", bytes / MIB),
            "GB/s",
            Better::Higher,
        );
        (row.ours, row.raw, row.cudarc1) = (Some(o), Some(r), Some(c));
        rep.push(row.check_vs_raw(3.0, Source::Issue));
        let mut row = Row::new(
            "pageable",
            format!(
                "(ceiling) pinned host-to-device, {} MiB, host time",
                bytes / MIB
            ),
            "GB/s",
            Better::Higher,
        );
        row.raw = Some(pin);
        rep.push(row);
    }
    rep.note("pageable: ours is `copy_to_device` from a `Vec`, staged through pinned blocks above the library's threshold");
    if std::env::var_os("BENCH_STAGING_SWEEP").is_some() {
        sweep(env)?;
    }
    Ok(())
}

/// With `BENCH_STAGING_SWEEP` set: the staged path's bandwidth, both directions, at
/// 64 MiB, for a grid of chunk sizes, ring depths and thread counts (printed only; used
/// to choose the library's defaults).
fn sweep(env: &Env) -> Result<()> {
    use stream_core::__private::{with_staging_config, StagingConfig};
    let bytes = 64 * MIB;
    let n = bytes / 4;
    let src: Vec<f32> = vec![1.0; n];
    let mut dst: Vec<f32> = vec![0.0; n];
    let mut dev_buf: DeviceVec<f32> = env.dev.alloc_vec(n)?;
    let stream = &env.streams[0];
    println!("  staging sweep, 64 MiB: chunk MiB, ring, threads -> host-to-device GB/s, device-to-host GB/s");
    for chunk_mib in [2usize, 4, 8, 16] {
        for ring in [4usize, 8] {
            for threads in [2usize, 4, 8] {
                let cfg = StagingConfig {
                    chunk_bytes: chunk_mib * MIB,
                    ring_blocks: ring,
                    threads,
                    ..StagingConfig::DEFAULT
                };
                let mut time = |upload: bool| -> Result<f64> {
                    let mut best = Vec::new();
                    for _ in 0..6 {
                        let t = std::time::Instant::now();
                        with_staging_config(cfg, || {
                            scope(stream, |s| {
                                let mut d = s.attach(&mut dev_buf)?;
                                if upload {
                                    s.copy_to_device(&src, &mut d)?;
                                } else {
                                    s.copy_to_host(&d, &mut dst)?.wait()?;
                                }
                                Ok::<_, Error>(())
                            })
                        })?;
                        best.push(t.elapsed().as_secs_f64());
                    }
                    best.sort_by(f64::total_cmp);
                    Ok(bytes as f64 / best[best.len() / 2] / 1e9)
                };
                let up = time(true)?;
                let down = time(false)?;
                println!("  staging sweep: {chunk_mib:>2} {ring} {threads} -> {up:6.2} {down:6.2}");
            }
        }
    }
    Ok(())
}

/// Host seconds of one `cuMemcpyHtoDAsync` of `src` and the synchronisation after it.
fn raw_copy(stream: sys::CUstream, dst: sys::CUdeviceptr, src: &[f32]) -> Result<f64> {
    let t = std::time::Instant::now();
    // SAFETY: `dst` holds as many bytes as `src`; `src` is borrowed until the stream is
    // synchronised below.
    let copied =
        unsafe { result::memcpy_htod_async(dst, src, stream) }.context("cuMemcpyHtoDAsync");
    // SAFETY: the stream is alive (owned by `Env`).
    unsafe { result::stream::synchronize(stream) }.context("cuStreamSynchronize")?;
    copied?;
    Ok(t.elapsed().as_secs_f64())
}
