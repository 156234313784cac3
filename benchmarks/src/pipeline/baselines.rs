//! The pipeline through raw driver calls (events between the lanes' streams) and
//! through cudarc's safe API, the baselines of the rows.

#![allow(unsafe_code)]
use crate::cuda::{self, work_config};
use crate::env::Env;
use crate::error::{Context, Result};
use crate::raw::{arg, RawEvent, RawPinned};
use crate::sampling::GpuTimer;
use cudarc::driver::{result, sys, PinnedHostSlice, PushKernelArg};

use super::shape::Shape;

/// Events the raw pipeline orders its streams with.
pub(super) struct RawEvents {
    fork: RawEvent,
    joins: Vec<RawEvent>,
}

impl RawEvents {
    pub(super) fn new() -> Result<Self> {
        Ok(RawEvents {
            fork: RawEvent::new()?,
            joins: (0..4).map(|_| RawEvent::new()).collect::<Result<_>>()?,
        })
    }
}

pub(super) fn raw_pipeline(
    env: &Env,
    lanes: usize,
    input: &RawPinned,
    output: &mut RawPinned,
    shape: Shape,
    timer: &GpuTimer,
    events: &RawEvents,
) -> Result<f64> {
    let streams: Vec<sys::CUstream> = env.raw_streams[..lanes].iter().map(|s| s.0).collect();
    let s0 = streams[0];
    let enqueued = (|| -> Result<()> {
        timer.start(s0)?;
        // SAFETY: the event and streams are alive; the other streams now wait for `s0`.
        unsafe { result::event::record(events.fork.0, s0) }.context("cuEventRecord")?;
        for &s in &streams[1..] {
            // SAFETY: as above.
            unsafe {
                result::stream::wait_event(
                    s,
                    events.fork.0,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .context("cuStreamWaitEvent")?;
        }
        let bytes = shape.chunk * 4;
        let cfg = work_config(shape.chunk);
        let chunks = input
            .as_slice()
            .chunks(shape.chunk)
            .zip(output.as_mut_slice().chunks_mut(shape.chunk));
        for (i, (x, y)) in chunks.enumerate() {
            let st = streams[i % lanes];
            // SAFETY: `st` is a live stream of the current context.
            let dx = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            // SAFETY: as above.
            let dy = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            // SAFETY: `dx` holds `bytes`, as many as `x`; `x` is pinned and outlives the
            // copy (the stream is joined into `s0`, which is synchronised before return).
            unsafe { result::memcpy_htod_async(dx, x, st) }.context("cuMemcpyHtoDAsync")?;
            let (iters, len) = (shape.iters, shape.chunk);
            let mut args = [arg(&iters), arg(&dx), arg(&len), arg(&dy), arg(&len)];
            // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two
            // device buffers of `len` floats, alive until their stream-ordered free below.
            unsafe { result::launch_kernel(env.raw_work.0, cfg.grid, cfg.block, 0, st, &mut args) }
                .context("cuLaunchKernel")?;
            // SAFETY: `y` has as many bytes as `dy`; nothing reads `y` before the join
            // and the synchronisation.
            unsafe { result::memcpy_dtoh_async(y, dy, st) }.context("cuMemcpyDtoHAsync")?;
            // SAFETY: allocated above on `st`; every use was enqueued on `st` before.
            unsafe { result::free_async(dx, st) }.context("cuMemFreeAsync")?;
            // SAFETY: as above.
            unsafe { result::free_async(dy, st) }.context("cuMemFreeAsync")?;
        }
        for (&s, join) in streams[1..].iter().zip(&events.joins) {
            // SAFETY: the event and streams are alive; `s0` now waits for `s`.
            unsafe { result::event::record(join.0, s) }.context("cuEventRecord")?;
            // SAFETY: as above.
            unsafe {
                result::stream::wait_event(
                    s0,
                    join.0,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .context("cuStreamWaitEvent")?;
        }
        timer.stop(s0)
    })();
    for &s in &streams {
        // SAFETY: the streams are alive; after this no copy into `output` is pending.
        unsafe { result::stream::synchronize(s) }.context("cuStreamSynchronize")?;
    }
    enqueued?;
    timer.seconds()
}

pub(super) fn cudarc_pipeline(
    env: &Env,
    lanes: usize,
    input: &[PinnedHostSlice<f32>],
    output: &mut [PinnedHostSlice<f32>],
    shape: Shape,
    timer: &GpuTimer,
) -> Result<f64> {
    let streams = &env.cu2[..lanes];
    let s0 = &streams[0];
    let cfg = cuda::to_cudarc(work_config(shape.chunk));
    let enqueued = (|| -> Result<()> {
        timer.start(s0.cu_stream())?;
        for s in &streams[1..] {
            s.join(s0).context("cudarc: join")?;
        }
        for (i, (x, y)) in input.iter().zip(output.iter_mut()).enumerate() {
            let st = &streams[i % lanes];
            let dx = st.clone_htod(x).context("cudarc: clone_htod")?;
            // SAFETY: the kernel writes every element before the download reads it.
            let mut dy = unsafe { st.alloc::<f32>(shape.chunk) }.context("cudarc: alloc")?;
            let mut l = st.launch_builder(&env.cu2_work);
            l.arg(&shape.iters)
                .arg(&dx)
                .arg(&shape.chunk)
                .arg(&mut dy)
                .arg(&shape.chunk);
            // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two
            // buffers of `chunk` floats and their lengths.
            unsafe { l.launch(cfg) }.context("cudarc: launch")?;
            st.memcpy_dtoh(&dy, y).context("cudarc: memcpy_dtoh")?;
        }
        for s in &streams[1..] {
            s0.join(s).context("cudarc: join")?;
        }
        timer.stop(s0.cu_stream())
    })();
    for s in streams {
        s.synchronize().context("cudarc: synchronize")?;
    }
    enqueued?;
    timer.seconds()
}
