//! The ranks diagnosis of the launch case, with `BENCH_LAUNCH_RANKS` set: printed only.
//! A process that drives several GPUs from a thread each (the data- and
//! expert-parallel examples without a launcher) issues from several threads at once,
//! where a process per GPU issues from one. This times the host cost of a tiny
//! kernel's launch on the first thread alone, then on a thread per GPU at once (two
//! threads on one GPU where there is one), ours (`tiny_u32` in a scope) against raw
//! `cuLaunchKernel` in the same process: if ours slows down more than raw when the
//! threads issue together, the library's process-wide state is the cost; if both do,
//! it is the driver's.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::{result, sys};
use stream_core::{scope, Device, DeviceVec, Stream};

use crate::cuda::{self, TINY_CONFIG};
use crate::error::{Context, Error, Result};
use crate::ranks::{self, Path};
use crate::raw::{arg, RawContext, RawDeviceMem, RawModule, RawStream};
use crate::sampling::median;

/// Launches per sample (below the driver's queue of pending launches, so that the
/// host never waits for the GPU), samples per thread and setting.
const LAUNCHES: usize = 400;
const SAMPLES: usize = 41;

pub(super) fn run() -> Result<()> {
    let ordinals = ranks::ordinals()?;
    if ordinals.is_empty() {
        return Ok(());
    }
    println!(
        "launch ranks: host ns per launch of tiny_u32, median of {SAMPLES} samples of {LAUNCHES}, \
         one thread alone and {} at once (GPUs {ordinals:?})",
        ordinals.len()
    );
    for path in [Path::Ours, Path::Raw, Path::Ours, Path::Raw] {
        let (alone, together) = ranks::alone_and_together(
            &ordinals,
            |ordinal| Side::new(ordinal, path),
            |(device, mut side)| {
                let mut samples = Vec::with_capacity(SAMPLES);
                for _ in 0..SAMPLES {
                    samples.push(side.sample()?);
                }
                // The side is freed before the device, while its context is retained.
                drop(side);
                drop(device);
                Ok(median(&samples))
            },
        )?;
        println!(
            "launch ranks: {path:?}: {}",
            ranks::summary(alone, &together, 0)
        );
    }
    Ok(())
}

/// One thread's stream, counter and kernel.
enum Side {
    Ours(Stream, DeviceVec<u32>),
    Raw {
        stream: RawStream,
        counter: RawDeviceMem,
        function: sys::CUfunction,
        _module: RawModule,
    },
}

impl Side {
    /// A thread's device (bound, for the raw path) and what its launches use.
    fn new(ordinal: usize, path: Path) -> Result<(Device, Side)> {
        let device = Device::new(ordinal)?;
        let side = match path {
            Path::Ours => Side::Ours(device.new_stream()?, device.alloc_vec(1)?),
            Path::Raw => {
                RawContext::current()?.bind()?;
                let cubin = cuda::compile_cubin(cuda::SOURCE, device.compute_capability())
                    .context("compiling tiny_u32 for the raw side")?;
                let module = RawModule::load(&cubin)?;
                Side::Raw {
                    function: module.function("tiny_u32")?,
                    _module: module,
                    stream: RawStream::new()?,
                    counter: RawDeviceMem::new(4)?,
                }
            }
        };
        Ok((device, side))
    }

    /// Host nanoseconds per launch of [`LAUNCHES`] launches, the stream synchronised
    /// after the timing.
    fn sample(&mut self) -> Result<f64> {
        match self {
            Side::Ours(stream, counter) => {
                let mut ns = 0.0;
                scope(stream, |s| {
                    let mut y = s.attach(counter)?;
                    let t = Instant::now();
                    for _ in 0..LAUNCHES {
                        cuda::tiny_u32(s, TINY_CONFIG, &mut y)?;
                    }
                    ns = t.elapsed().as_nanos() as f64 / LAUNCHES as f64;
                    Ok::<_, Error>(())
                })?;
                Ok(ns)
            }
            Side::Raw {
                stream,
                counter,
                function,
                ..
            } => {
                let len: usize = 1;
                let mut args = [arg(&counter.ptr), arg(&len)];
                let (g, b) = (TINY_CONFIG.grid, TINY_CONFIG.block);
                let t = Instant::now();
                let mut launched = Ok(());
                for _ in 0..LAUNCHES {
                    // SAFETY: `tiny_u32(unsigned*, size_t)` gets a pointer to 4 bytes of
                    // device memory and the length 1; the memory outlives the launch
                    // (the stream is synchronised below, before it can be freed).
                    launched =
                        unsafe { result::launch_kernel(*function, g, b, 0, stream.0, &mut args) }
                            .context("cuLaunchKernel");
                    if launched.is_err() {
                        break;
                    }
                }
                let ns = t.elapsed().as_nanos() as f64 / LAUNCHES as f64;
                stream.sync()?;
                launched.map(|()| ns)
            }
        }
    }
}
