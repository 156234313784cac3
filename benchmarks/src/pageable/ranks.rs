//! The ranks diagnosis of the pageable case, with `BENCH_STAGING_RANKS` set: printed
//! only. A process that drives several GPUs, a thread per GPU (the data- and
//! expert-parallel examples without a launcher), copies pageable memory from several
//! threads at once, where a process per GPU copies from one. This times a round trip
//! (an upload of a pageable `Vec`, a download into another, the data on the host) on
//! the first thread alone, then on a thread per GPU at once (two threads on one GPU
//! where there is one), ours (the staged path) against the driver's pageable path
//! (`cuMemcpyHtoDAsync`, `cuMemcpyDtoHAsync`, `cuStreamSynchronize`) in the same
//! process. What the threads slow each other down by is the cost of sharing one
//! process.

use std::time::Instant;

use stream_core::{scope, Device};

use super::raw_copy::enqueue;
use crate::env::MIB;
use crate::error::{Error, Result};
use crate::ranks::{self, Path};
use crate::raw::{RawContext, RawDeviceMem, RawStream};
use crate::sampling::median;

/// Round trips per thread and setting, after [`WARMUP`] untimed ones.
const ROUND_TRIPS: usize = 200;
const WARMUP: usize = 20;
/// Sizes of each copy.
const SIZES: [usize; 3] = [MIB, 4 * MIB, 32 * MIB];

pub(super) fn run() -> Result<()> {
    let ordinals = ranks::ordinals()?;
    if ordinals.is_empty() {
        return Ok(());
    }
    println!(
        "pageable ranks: a round trip (pageable upload, pageable download, data on the host) per thread, \
         median of {ROUND_TRIPS}, one thread alone and {} at once (GPUs {ordinals:?}), us",
        ordinals.len()
    );
    for bytes in SIZES {
        for path in [Path::Ours, Path::Raw] {
            let (alone, together) = ranks::alone_and_together(
                &ordinals,
                |ordinal| prepare(ordinal, bytes, path),
                |prepared| round_trips(prepared, bytes, path),
            )?;
            println!(
                "pageable ranks: {:>2} MiB {path:?}: {}",
                bytes / MIB,
                ranks::summary(alone, &together, 1)
            );
        }
    }
    Ok(())
}

/// Median microseconds of a round trip of `bytes` each way on `prepared`'s device, its
/// data checked afterwards.
fn round_trips((device, mut buffers): (Device, Buffers), bytes: usize, path: Path) -> Result<f64> {
    let (up, down) = (&buffers.up, &mut buffers.down);
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    let mut time = |i: usize, t: Instant| {
        if i >= WARMUP {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    };
    match &mut buffers.device {
        // A scope per round trip, as a training step opens one.
        Side::Ours(stream, vec) => {
            for i in 0..WARMUP + ROUND_TRIPS {
                let t = Instant::now();
                scope(stream, |s| {
                    let mut buffer = s.attach(&mut *vec)?;
                    s.copy_to_device(up, &mut buffer)?;
                    s.copy_to_host(&buffer, &mut *down)?.wait()?;
                    Ok::<_, stream_core::Error>(())
                })?;
                time(i, t);
            }
        }
        Side::Raw(stream, buffer) => {
            let mut up = up.clone();
            for i in 0..WARMUP + ROUND_TRIPS {
                let t = Instant::now();
                enqueue(stream.0, true, buffer, &mut up)?;
                enqueue(stream.0, false, buffer, down)?;
                stream.sync()?;
                time(i, t);
            }
        }
    }
    if buffers.down != buffers.up {
        return Err(Error::msg(format!(
            "pageable ranks: {path:?}'s round trip of {bytes} bytes on GPU {} came back different",
            device.ordinal()
        )));
    }
    // The memory is freed before the device, while its context is still retained.
    drop(buffers);
    drop(device);
    Ok(median(&times))
}

/// One thread's memory: the pageable `Vec`s and the device side of `path`.
struct Buffers {
    up: Vec<f32>,
    down: Vec<f32>,
    device: Side,
}

/// The device memory and stream of a path.
enum Side {
    Ours(stream_core::Stream, stream_core::DeviceVec<f32>),
    Raw(RawStream, RawDeviceMem),
}

/// A thread's device (bound, for the raw path) and memory.
fn prepare(ordinal: usize, bytes: usize, path: Path) -> Result<(Device, Buffers)> {
    let device = Device::new(ordinal)?;
    let side = match path {
        Path::Ours => Side::Ours(device.new_stream()?, device.alloc_vec(bytes / 4)?),
        Path::Raw => {
            RawContext::current()?.bind()?;
            Side::Raw(RawStream::new()?, RawDeviceMem::new(bytes)?)
        }
    };
    let buffers = Buffers {
        up: (0..bytes / 4).map(|i| i as f32).collect(),
        down: vec![0f32; bytes / 4],
        device: side,
    };
    Ok((device, buffers))
}
