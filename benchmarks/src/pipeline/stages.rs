//! The pipeline's stages timed alone (all chunks, one raw stream, event timing): the
//! figures the overlap bound is made of.
#![allow(unsafe_code)]

use cudarc::driver::{result, sys};

use super::shape::Shape;
use crate::cuda::work_config;
use crate::env::Env;
use crate::error::{Context, Result};
use crate::raw::{self, arg, RawDeviceMem, RawEvent, RawPinned};
use crate::sampling::{GpuTimer, Stats};

/// Stage times measured alone on one raw stream, event-timed.
pub(super) struct Stages {
    stream: sys::CUstream,
    other: sys::CUstream,
    x: RawDeviceMem,
    y: RawDeviceMem,
    y2: RawDeviceMem,
    timer: GpuTimer,
    fork: RawEvent,
    join: RawEvent,
    function: sys::CUfunction,
}

/// One stage of the pipeline, timed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Upload,
    Kernel,
    Download,
    /// Upload on one stream and download on another, at the same time.
    UploadAndDownload,
}

impl Stages {
    pub(super) fn new(env: &Env, shape: Shape) -> Result<Self> {
        let bytes = shape.chunk * 4;
        Ok(Stages {
            stream: env.raw_streams[0].0,
            other: env.raw_streams[1].0,
            x: RawDeviceMem::new(bytes)?,
            y: RawDeviceMem::new(bytes)?,
            y2: RawDeviceMem::new(bytes)?,
            timer: GpuTimer::new()?,
            fork: RawEvent::new()?,
            join: RawEvent::new()?,
            function: env.raw_work.0,
        })
    }

    /// Median GPU seconds of `stage` over all chunks (after one warm-up run).
    pub(super) fn time(
        &self,
        stage: Stage,
        input: &RawPinned,
        output: &mut RawPinned,
        shape: Shape,
        reps: usize,
    ) -> Result<f64> {
        let mut once = || self.once(stage, input, output, shape);
        once()?;
        let samples = (0..reps).map(|_| once()).collect::<Result<Vec<_>>>()?;
        Ok(Stats::new(samples)?.median)
    }

    pub(super) fn once(
        &self,
        stage: Stage,
        input: &RawPinned,
        output: &mut RawPinned,
        shape: Shape,
    ) -> Result<f64> {
        let both = stage == Stage::UploadAndDownload;
        let enqueued = (|| -> Result<()> {
            self.timer.start(self.stream)?;
            if both {
                raw::order(self.fork.0, self.stream, self.other)?;
            }
            let cfg = work_config(shape.chunk);
            let chunks = input
                .as_slice()
                .chunks(shape.chunk)
                .zip(output.as_mut_slice().chunks_mut(shape.chunk));
            for (x, y) in chunks {
                if matches!(stage, Stage::Upload | Stage::UploadAndDownload) {
                    // SAFETY: `self.x` holds a chunk; `x` is pinned and outlives the copy
                    // (synchronised below).
                    unsafe { result::memcpy_htod_async(self.x.ptr, x, self.stream) }
                        .context("cuMemcpyHtoDAsync")?;
                }
                if stage == Stage::Kernel {
                    let (iters, len) = (shape.iters, shape.chunk);
                    let mut args = [
                        arg(&iters),
                        arg(&self.x.ptr),
                        arg(&len),
                        arg(&self.y.ptr),
                        arg(&len),
                    ];
                    // SAFETY: `work_f32` gets two device buffers of `len` floats.
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
                    .context("cuLaunchKernel")?;
                }
                if matches!(stage, Stage::Download | Stage::UploadAndDownload) {
                    // Alone: from `y` on the timed stream; together with the uploads: from
                    // `y2` (which nothing writes) on the other stream.
                    let (src, st) = if both {
                        (self.y2.ptr, self.other)
                    } else {
                        (self.y.ptr, self.stream)
                    };
                    // SAFETY: `y` has as many bytes as `src`; nothing reads it before the
                    // synchronisation below.
                    unsafe { result::memcpy_dtoh_async(y, src, st) }
                        .context("cuMemcpyDtoHAsync")?;
                }
            }
            if both {
                raw::order(self.join.0, self.other, self.stream)?;
            }
            self.timer.stop(self.stream)
        })();
        for s in [self.stream, self.other] {
            // SAFETY: the streams are alive (owned by `Env`).
            unsafe { result::stream::synchronize(s) }.context("cuStreamSynchronize")?;
        }
        enqueued?;
        self.timer.seconds()
    }
}
