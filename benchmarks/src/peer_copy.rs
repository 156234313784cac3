//! Case 13: copies between two GPUs' memory (GPU time, as GB/s), both directions, 64 MiB
//! to 1 GiB: ours (a fork onto GPU 1's stream that lends GPU 0 memory, and
//! `copy_device` there, the library granting the pools' peer access once) against raw
//! `cuMemcpyPeerAsync` on a raw stream of GPU 1, in the same run, between `cuMemAlloc`
//! buffers of contexts that a raw program has given each other's peer access
//! (`cuCtxEnablePeerAccess`, both ways; without it the driver stages the copy through
//! the host, at about a tenth of the speed). The bytes each side copied are checked once
//! per size.
#![allow(unsafe_code)]

use cudarc::driver::{result, sys};
use stream_core::{scope, Device, DeviceVec, Error as CoreError};

use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{RawDeviceMem, RawStream};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::GpuTimer;

/// Runs case 13.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    if Device::count()? < 2 {
        rep.note("peer: one CUDA device: no copy between two GPUs to measure");
        return Ok(());
    }
    let (d0, d1) = (env.dev.clone(), Device::new(1)?);
    let s1 = d1.new_stream()?;
    let sizes: &[usize] = env
        .cfg
        .pick(&[64 * MIB, 256 * MIB, 1024 * MIB], &[64 * MIB]);
    let (warmup, reps) = env.cfg.pick((2, 10), (1, 3));
    let Some(raw) = RawPair::new()? else {
        rep.note("peer: GPUs 0 and 1 have no peer access to each other: no direct copy to measure");
        return Ok(());
    };
    for &bytes in sizes {
        let pattern: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        let mut x0 = d0.upload_vec(&pattern)?;
        let mut y1 = d1.alloc_vec::<u8>(bytes)?;
        let timer = stream_core::GpuTimer::new(&d1)?;
        let buffers = raw.buffers(&pattern)?;
        for to_gpu1 in [true, false] {
            let direction = if to_gpu1 {
                "GPU 0 -> GPU 1"
            } else {
                "GPU 1 -> GPU 0"
            };
            let mut ours = || -> Result<f64> {
                ours_copy(&env.streams[0], &s1, &mut x0, &mut y1, &timer, to_gpu1)
            };
            let theirs = || raw.copy(&buffers, to_gpu1);
            let row = Measurement::new()
                .ours("ours", &mut ours)
                .raw("raw cuMemcpyPeerAsync", theirs)
                .into_row(
                    env.cfg.plan(warmup, reps),
                    Row::new(
                        "peer",
                        format!("copy {} MiB {direction}", bytes / MIB),
                        "GB/s",
                        Better::Higher,
                    ),
                )?
                .in_unit(|t| bytes as f64 / t / 1e9);
            rep.push(row.check_vs_raw(0.98, Source::Goal));
        }
        // The last copies went GPU 1 -> GPU 0 after GPU 0 -> GPU 1: both sides end where
        // they started, with the pattern.
        if x0.to_host_vec()? != pattern || y1.to_host_vec()? != pattern {
            return Err(Error::msg(format!(
                "peer: ours did not copy {bytes} bytes faithfully"
            )));
        }
        raw.check(&buffers, &pattern)?;
        raw.free(buffers)?;
    }
    // GPU 1's stream and timer go with GPU 1's context current; the next case finds GPU
    // 0's current, as this one did.
    let contexts = raw.contexts;
    bind(contexts[1])?;
    drop(raw);
    bind(contexts[0])
}

/// One copy through the library, timed on GPU 1's stream: a scope on GPU 0 lends `x0`
/// to a fork onto `s1`, which copies it into `y1` (or `y1` into it).
fn ours_copy(
    s0: &stream_core::Stream,
    s1: &stream_core::Stream,
    x0: &mut DeviceVec<u8>,
    y1: &mut DeviceVec<u8>,
    timer: &stream_core::GpuTimer,
    to_gpu1: bool,
) -> Result<f64> {
    scope(s0, |a| {
        let mut x = a.attach(x0)?;
        a.fork(s1, &mut x, |c, mut x| {
            timer.start(c)?;
            if to_gpu1 {
                let mut y = c.attach(y1)?;
                c.copy_device(&x, &mut y)?;
            } else {
                let y = c.attach_ref(y1)?;
                c.copy_device(&y, &mut x)?;
            }
            timer.stop(c)
        })
    })
    .map_err(|e: CoreError| Error::from(e))?;
    Ok(timer.elapsed()?.as_secs_f64())
}

/// The raw side: the primary contexts of GPUs 0 and 1, and a stream of GPU 1.
struct RawPair {
    contexts: [sys::CUcontext; 2],
    stream: RawStream,
    timer: GpuTimer,
}

/// `cuMemAlloc` memory on GPU 0 and on GPU 1.
struct RawBuffers {
    on0: RawDeviceMem,
    on1: RawDeviceMem,
}

impl RawPair {
    /// `None` where the two GPUs cannot reach each other's memory.
    fn new() -> Result<Option<Self>> {
        let mut contexts = [std::ptr::null_mut(); 2];
        for (ordinal, context) in contexts.iter_mut().enumerate() {
            let dev = result::device::get(ordinal as i32).context("cuDeviceGet")?;
            // SAFETY: `dev` came from cuDeviceGet; the library's `Device`s of the bench
            // retain the same primary contexts for as long as it runs.
            *context =
                unsafe { result::primary_ctx::retain(dev) }.context("cuDevicePrimaryCtxRetain")?;
        }
        // What a raw program does before peer copies: each context may reach the other's
        // `cuMemAlloc` memory. Peer access lasts as long as the contexts; a second call
        // (another case, another round) answers that it is already enabled.
        for (from, to) in [(0, 1), (1, 0)] {
            bind(contexts[from])?;
            // SAFETY: both are live primary contexts (retained above); flags must be 0.
            match unsafe { sys::cuCtxEnablePeerAccess(contexts[to], 0) } {
                sys::cudaError_enum::CUDA_SUCCESS
                | sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
                    bind(contexts[0])?;
                    return Ok(None);
                }
                refused => {
                    bind(contexts[0])?;
                    return Err(Error::msg(format!(
                        "peer: cuCtxEnablePeerAccess GPU {from} -> GPU {to}: {refused:?}"
                    )));
                }
            }
        }
        let pair = RawPair {
            contexts,
            stream: {
                bind(contexts[1])?;
                RawStream::new()?
            },
            timer: GpuTimer::new()?, // GPU 1's context is current
        };
        bind(contexts[0])?;
        Ok(Some(pair))
    }

    /// `pattern` on both GPUs.
    fn buffers(&self, pattern: &[u8]) -> Result<RawBuffers> {
        let mut made = Vec::new();
        for &context in &self.contexts {
            bind(context)?;
            made.push(RawDeviceMem::upload(pattern)?);
        }
        bind(self.contexts[0])?;
        let on1 = made
            .pop()
            .ok_or_else(|| Error::msg("peer: no GPU 1 buffer"))?;
        let on0 = made
            .pop()
            .ok_or_else(|| Error::msg("peer: no GPU 0 buffer"))?;
        Ok(RawBuffers { on0, on1 })
    }

    /// One `cuMemcpyPeerAsync` on GPU 1's stream, timed there.
    fn copy(&self, b: &RawBuffers, to_gpu1: bool) -> Result<f64> {
        bind(self.contexts[1])?;
        let (dst, dst_ctx, src, src_ctx) = if to_gpu1 {
            (b.on1.ptr, self.contexts[1], b.on0.ptr, self.contexts[0])
        } else {
            (b.on0.ptr, self.contexts[0], b.on1.ptr, self.contexts[1])
        };
        self.timer.start(self.stream.0)?;
        // SAFETY: `dst` and `src` are `cuMemAlloc` allocations of `b.on0.bytes` bytes in
        // the contexts named beside them, alive until `free` (after the stream below is
        // synchronised); the stream is a live stream of GPU 1's context, bound above.
        let copied = unsafe {
            sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, b.on0.bytes, self.stream.0)
        }
        .result();
        let stopped = self.timer.stop(self.stream.0);
        self.stream.sync()?;
        bind(self.contexts[0])?;
        copied.context("cuMemcpyPeerAsync")?;
        stopped?;
        self.timer.seconds()
    }

    /// Both buffers hold `pattern` (the last copy went back the way the first came).
    fn check(&self, b: &RawBuffers, pattern: &[u8]) -> Result<()> {
        for (context, m) in self.contexts.iter().zip([&b.on0, &b.on1]) {
            bind(*context)?;
            let mut back = vec![0u8; pattern.len()];
            // SAFETY: `m` holds as many bytes as `back`; every copy into it was synchronised.
            unsafe { result::memcpy_dtoh_sync(&mut back, m.ptr) }.context("cuMemcpyDtoH")?;
            if back != pattern {
                bind(self.contexts[0])?;
                return Err(Error::msg(
                    "peer: raw cuMemcpyPeerAsync did not copy faithfully",
                ));
            }
        }
        bind(self.contexts[0])
    }

    /// Frees each buffer with its own context current.
    fn free(&self, b: RawBuffers) -> Result<()> {
        bind(self.contexts[1])?;
        drop(b.on1);
        bind(self.contexts[0])?;
        drop(b.on0);
        Ok(())
    }
}

/// Makes `context` current on this thread.
fn bind(context: sys::CUcontext) -> Result<()> {
    // SAFETY: a live primary context (retained in `RawPair::new` and by the library's
    // `Device`s).
    unsafe { result::ctx::set_current(context) }.context("cuCtxSetCurrent")
}
