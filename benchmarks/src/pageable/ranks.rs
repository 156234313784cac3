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

use std::sync::Barrier;
use std::time::Instant;

use stream_core::{scope, Device};

use super::raw_copy::enqueue;
use crate::env::MIB;
use crate::error::{Context, Result};
use crate::raw::{RawContext, RawDeviceMem, RawStream};
use crate::sampling::median;

/// Round trips per thread and setting, after [`WARMUP`] untimed ones.
const ROUND_TRIPS: usize = 200;
const WARMUP: usize = 20;
/// Sizes of each copy.
const SIZES: [usize; 3] = [MIB, 4 * MIB, 32 * MIB];

/// Which path the round trips take.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Ours,
    Raw,
}

pub(super) fn run() -> Result<()> {
    let count = Device::count()?;
    let ordinals: Vec<usize> = match count {
        0 => return Ok(()),
        1 => vec![0, 0],
        n => (0..n.min(8)).collect(),
    };
    println!(
        "pageable ranks: a round trip (pageable upload, pageable download, data on the host) per thread, \
         median of {ROUND_TRIPS}, one thread alone and {} at once (GPUs {ordinals:?}), us",
        ordinals.len()
    );
    for bytes in SIZES {
        for path in [Path::Ours, Path::Raw] {
            let alone = round_trips(&ordinals[..1], bytes, path)?;
            let together = round_trips(&ordinals, bytes, path)?;
            let worst = together.iter().copied().fold(0.0, f64::max);
            println!(
                "pageable ranks: {:>2} MiB {:?}: alone {:.1}, together {} (slowest {:.2}x of alone)",
                bytes / MIB,
                path,
                alone[0],
                together
                    .iter()
                    .map(|t| format!("{t:.1}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                worst / alone[0]
            );
        }
    }
    Ok(())
}

/// Median microseconds of a round trip of `bytes` each way on a thread per entry of
/// `ordinals` (the device it copies to), all started together.
fn round_trips(ordinals: &[usize], bytes: usize, path: Path) -> Result<Vec<f64>> {
    let start = Barrier::new(ordinals.len());
    std::thread::scope(|threads| {
        let handles: Vec<_> = ordinals
            .iter()
            .map(|&ordinal| {
                let start = &start;
                threads.spawn(move || -> Result<f64> {
                    // Every thread reaches the barrier, also when its setup failed, so
                    // that no other thread waits for it forever.
                    let prepared = prepare(ordinal, bytes, path);
                    start.wait();
                    // The memory is dropped before the device (the reverse order of this pattern),
                    // while the device's context is still retained.
                    let (_device, mut buffers) = prepared?;
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
                        return Err(crate::error::Error::msg(format!(
                            "pageable ranks: {path:?}'s round trip of {bytes} bytes on GPU {ordinal} came back different"
                        )));
                    }
                    Ok(median(&times))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| crate::error::Error::msg("a thread panicked"))?
            })
            .collect::<Result<Vec<f64>>>()
            .context("pageable ranks")
    })
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
