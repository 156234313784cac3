//! The async design's shape in raw driver calls, without the library or an executor:
//! where the 1 MiB polling loop's limit is (issue 30).
//!
//! [`EXECUTOR_THREADS`](super::EXECUTOR_THREADS) OS threads each own `CLIENTS / threads`
//! clients (a raw stream, an event and the client's buffers). A thread enqueues each of
//! its clients' request (the same allocation, upload, `work_f32` launch, download and
//! stream-ordered frees as `request_steps::raw`) and records the client's event after
//! it, then queries its clients' events in turn (`cuEventQuery`, spinning) and enqueues
//! a client's next request as soon as its event has completed. This is what a C++
//! server written against the driver with few threads would do: if it moves as many
//! requests per second as the threads design, the library's polling mode is what costs;
//! if it moves as few as the library, the design does.
//!
//! The events are made without timing, as such a server would make them; with
//! `BENCH_SERVE_BLOCKING_EVENTS` set they are also `CU_EVENT_BLOCKING_SYNC`, as the
//! library's completion events are, whichever completion mode runs (a diagnosis of
//! whether that flag costs GPU throughput).
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::{result, sys};

use super::client::{input, CLIENTS, ITERS};
use crate::cuda::work_config;
use crate::error::{Context, Error, Result};
use crate::raw::{arg, RawContext, RawDeviceMem, RawEvent, RawFunction, RawPinned, RawStream};

/// One client of the raw event loop: its stream, the event recorded after each of its
/// requests, its pinned request and reply buffers and, in the loop that keeps them, its
/// device buffers.
pub(super) struct RawClient {
    stream: RawStream,
    done: RawEvent,
    input: RawPinned,
    output: RawPinned,
    kept: Option<(RawDeviceMem, RawDeviceMem)>,
}

// SAFETY: the stream, event and memory are handles and allocations of the benchmark's
// context, which every thread of the loop binds before it touches them; a client is
// used by one thread at a time (`&mut`).
unsafe impl Send for RawClient {}

impl Drop for RawClient {
    fn drop(&mut self) {
        // Waits for the client's last request before its buffers are freed (the fields
        // drop after this).
        let _ = self.stream.sync();
    }
}

impl RawClient {
    /// The reply buffer, for checking after a batch (which ends with every event
    /// completed, so no copy into it is pending).
    pub(super) fn output(&self) -> &[f32] {
        self.output.as_slice()
    }
}

/// `CLIENTS` raw clients with requests of `elems` elements, in the current context.
pub(super) fn raw_clients(elems: usize, keep_device_buffers: bool) -> Result<Vec<RawClient>> {
    let mut flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    if std::env::var_os("BENCH_SERVE_BLOCKING_EVENTS").is_some() {
        flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
    }
    (0..CLIENTS)
        .map(|_| {
            let stream = RawStream::new()?;
            let done = RawEvent::with_flags(flags)?;
            let mut input_buffer = RawPinned::new(elems)?;
            for (j, v) in input_buffer.as_mut_slice().iter_mut().enumerate() {
                *v = input(j);
            }
            let mut output = RawPinned::new(elems)?;
            output.as_mut_slice().fill(f32::NAN);
            let bytes = elems * std::mem::size_of::<f32>();
            let kept = match keep_device_buffers {
                true => Some((RawDeviceMem::new(bytes)?, RawDeviceMem::new(bytes)?)),
                false => None,
            };
            Ok(RawClient {
                stream,
                done,
                input: input_buffer,
                output,
                kept,
            })
        })
        .collect()
}

/// `per_client` requests from each client, `threads` threads each serving its share of
/// the clients; the batch's seconds.
pub(super) fn event_loop_batch(
    ctx: &RawContext,
    work: RawFunction,
    clients: &mut [RawClient],
    threads: usize,
    per_client: usize,
) -> Result<f64> {
    let share = clients.len().div_ceil(threads.max(1));
    let start = Instant::now();
    std::thread::scope(|t| {
        let loops: Vec<_> = clients
            .chunks_mut(share)
            .map(|mine| {
                t.spawn(move || {
                    ctx.bind()?;
                    serve(work, mine, per_client)
                })
            })
            .collect();
        for l in loops {
            l.join()
                .map_err(|_| Error::msg("event loop: a thread panicked"))??;
        }
        Ok::<_, Error>(())
    })?;
    Ok(start.elapsed().as_secs_f64())
}

/// One thread's loop over its clients.
fn serve(work: RawFunction, clients: &mut [RawClient], per_client: usize) -> Result<()> {
    let mut sent = vec![0usize; clients.len()];
    for (client, sent) in clients.iter_mut().zip(&mut sent) {
        enqueue(work, client)?;
        *sent = 1;
    }
    let mut in_flight = clients.len();
    while in_flight > 0 {
        for (client, sent) in clients.iter_mut().zip(&mut sent) {
            if *sent == 0 {
                continue; // this client has finished
            }
            // SAFETY: the client's event, alive while the client is.
            match unsafe { sys::cuEventQuery(client.done.0) } {
                sys::CUresult::CUDA_SUCCESS if *sent < per_client => {
                    enqueue(work, client)?;
                    *sent += 1;
                }
                sys::CUresult::CUDA_SUCCESS => {
                    *sent = 0;
                    in_flight -= 1;
                }
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(Error::msg(format!("event loop: cuEventQuery: {e:?}"))),
            }
        }
    }
    Ok(())
}

/// Enqueues one request of `client` and records its event after it.
fn enqueue(work: RawFunction, client: &mut RawClient) -> Result<()> {
    let st = client.stream.0;
    let len = client.input.as_slice().len();
    let bytes = std::mem::size_of_val(client.input.as_slice());
    let cfg = work_config(len);
    let (x, y) = match &client.kept {
        Some((x, y)) => (x.ptr, y.ptr),
        None => {
            // SAFETY: `st` is a live stream of the current context.
            let x = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            // SAFETY: as above.
            let y = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            (x, y)
        }
    };
    // SAFETY: `x` holds `bytes`, as many as the pinned input, which the client owns and
    // does not touch until its event has completed.
    unsafe { result::memcpy_htod_async(x, client.input.as_slice(), st) }
        .context("cuMemcpyHtoDAsync")?;
    let mut args = [arg(&ITERS), arg(&x), arg(&len), arg(&y), arg(&len)];
    // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two device
    // buffers of `len` floats, alive until their frees below (or, kept, the client's).
    unsafe { result::launch_kernel(work.0, cfg.grid, cfg.block, 0, st, &mut args) }
        .context("cuLaunchKernel")?;
    // SAFETY: the pinned reply has as many bytes as `y`; nothing reads it before the
    // client's event has completed.
    unsafe { result::memcpy_dtoh_async(client.output.as_mut_slice(), y, st) }
        .context("cuMemcpyDtoHAsync")?;
    if client.kept.is_none() {
        // SAFETY: allocated above on `st`; every use was enqueued on `st` before.
        unsafe { result::free_async(x, st) }.context("cuMemFreeAsync")?;
        // SAFETY: as above.
        unsafe { result::free_async(y, st) }.context("cuMemFreeAsync")?;
    }
    // SAFETY: the client's event and stream, both alive.
    unsafe { result::event::record(client.done.0, st) }.context("cuEventRecord")
}
