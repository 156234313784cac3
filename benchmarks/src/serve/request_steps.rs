//! `BENCH_SERVE_DIAG=1`: where the host time of one 1 MiB request of case `serve` goes,
//! step by step, ours in a scope against the same raw driver calls (printed only).
//!
//! The request is the server loop's: an upload from pinned memory, an allocation, the
//! `work_f32` kernel, a download into pinned memory, the frees and the synchronisation.
//! Ours takes its pinned buffers from the device's pool (`alloc_pinned`); the raw side
//! runs once from a `cuMemHostAlloc` buffer of its own and once from the pool's buffers,
//! so that a cost of the memory itself and a cost of the library separate.
//!
//! Case `serve` prints these steps (and, the first time, the enqueue-cost row's own
//! per-request distribution) three times: before its server loops, after them and the
//! cost rows, and at its end. What it showed on an H100: the library adds nothing per
//! step that the raw calls do not cost, but `cuMemAllocAsync` itself costs 0.6 to 6 µs
//! of host time in one state of the device's pool and 47 to 53 µs in another (after the
//! 16-stream server loops; raw calls alike), which is what the 1 MiB enqueue-cost row
//! (about 110 µs per request) consists of.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::result;
use stream_core::{scope, Error as CoreError, PinnedBuffer};

use crate::cuda::{self, work_config};
use crate::env::Env;
use crate::error::{Context, Result};
use crate::raw::{arg, RawPinned};

/// Requests per side.
const REQUESTS: usize = 300;
/// Kernel iterations per element, as in case `serve`.
const ITERS: u32 = 32;

/// Host nanoseconds of each step of one request.
type Steps = Vec<(&'static str, f64)>;

/// Prints the median host time of each step, ours and raw.
pub fn print(env: &Env) -> Result<()> {
    let elems = 1 << 18;
    let mut input = env.dev.alloc_pinned::<f32>(elems)?;
    input.fill(1.0);
    let mut output = env.dev.alloc_pinned::<f32>(elems)?;
    let mut raw_input = RawPinned::new(elems)?;
    raw_input.as_mut_slice().fill(1.0);
    let mut raw_output = RawPinned::new(elems)?;
    let super::client::Client {
        input: serve_input,
        output: mut serve_output,
        ..
    } = super::client::client_buffers(env, elems, false)?
        .pop()
        .ok_or_else(|| crate::error::Error::msg("no client buffers"))?;
    let staged_before = stream_core::staging::staged_copy_counts();
    for name in [
        "ours, the serve case's buffers",
        "raw, the serve case's buffers",
        "ours, pool pinned",
        "raw, own cuMemHostAlloc",
        "raw, pool pinned",
        "ours, the serve case's buffers",
    ] {
        let mut samples: Vec<Steps> = Vec::with_capacity(REQUESTS);
        for _ in 0..REQUESTS {
            samples.push(match name {
                "ours, pool pinned" => ours(env, &input, &mut output)?,
                "ours, the serve case's buffers" => ours(env, &serve_input, &mut serve_output)?,
                "raw, the serve case's buffers" => raw(env, &serve_input, &mut serve_output)?,
                "raw, own cuMemHostAlloc" => {
                    raw(env, raw_input.as_slice(), raw_output.as_mut_slice())?
                }
                _ => raw(env, &input, &mut output)?,
            });
        }
        let line = (0..samples[0].len())
            .map(|step| {
                let mut ns: Vec<f64> = samples.iter().map(|s| s[step].1).collect();
                ns.sort_by(f64::total_cmp);
                let mean = ns.iter().sum::<f64>() / ns.len() as f64;
                format!(
                    "{} {:.0}/{mean:.0}/{:.0}",
                    samples[0][step].0,
                    ns[ns.len() / 2],
                    ns[ns.len() - 1]
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        println!("  serve diag: 1 MiB request, {name}, ns per step (median/mean/max): {line}");
    }
    println!(
        "  serve diag: staged (uploads, downloads) before the steps {staged_before:?}, after {:?}",
        stream_core::staging::staged_copy_counts()
    );
    Ok(())
}

/// A stopwatch that notes the time since its last lap under each step's name, starting
/// with a lap of [`cpu_reference`].
struct Laps {
    steps: Steps,
    last: Instant,
}

impl Laps {
    fn start() -> Self {
        let mut laps = Laps {
            steps: Steps::new(),
            last: Instant::now(),
        };
        cpu_reference();
        laps.lap("cpu ref");
        laps
    }

    fn lap(&mut self, name: &'static str) {
        self.steps
            .push((name, self.last.elapsed().as_nanos() as f64));
        self.last = Instant::now();
    }
}

/// One request in a scope on the case's first stream, each step timed.
fn ours(env: &Env, input: &PinnedBuffer<f32>, output: &mut PinnedBuffer<f32>) -> Result<Steps> {
    let mut laps = Laps::start();
    scope(&env.streams[0], |s| {
        laps.lap("enter");
        let mut x = s.alloc::<f32>(input.len())?;
        laps.lap("alloc x");
        s.copy_to_device(&input[..], &mut x)?;
        laps.lap("upload");
        let mut y = s.alloc::<f32>(x.len())?;
        laps.lap("alloc y");
        cuda::work_f32(s, work_config(x.len()), ITERS, &x, &mut y)?;
        laps.lap("kernel");
        let _reply = s.copy_to_host(&y, &mut output[..])?;
        laps.lap("download");
        drop((x, y));
        laps.lap("frees");
        Ok::<_, CoreError>(())
    })?;
    laps.lap("exit");
    Ok(laps.steps)
}

/// The same request in raw driver calls on the first raw stream.
fn raw(env: &Env, input: &[f32], output: &mut [f32]) -> Result<Steps> {
    let st = env.raw_streams[0].0;
    let bytes = std::mem::size_of_val(input);
    let mut laps = Laps::start();
    laps.lap("enter");
    // SAFETY: `st` is a live stream of the current context.
    let dx = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
    laps.lap("alloc x");
    // SAFETY: `dx` holds `bytes`, as many as `input`, which is pinned and outlives the
    // copy (the stream is synchronised before this function returns).
    unsafe { result::memcpy_htod_async(dx, input, st) }.context("cuMemcpyHtoDAsync")?;
    laps.lap("upload");
    // SAFETY: as above.
    let dy = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
    laps.lap("alloc y");
    let len = input.len();
    let cfg = work_config(len);
    let mut args = [arg(&ITERS), arg(&dx), arg(&len), arg(&dy), arg(&len)];
    // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two device
    // buffers of `len` floats, alive until their stream-ordered frees below.
    unsafe { result::launch_kernel(env.raw_work.0, cfg.grid, cfg.block, 0, st, &mut args) }
        .context("cuLaunchKernel")?;
    laps.lap("kernel");
    // SAFETY: `output` has as many bytes as `dy`; nothing reads it before the
    // synchronisation below.
    unsafe { result::memcpy_dtoh_async(output, dy, st) }.context("cuMemcpyDtoHAsync")?;
    laps.lap("download");
    // SAFETY: allocated above on `st`; every use was enqueued on `st` before.
    unsafe { result::free_async(dx, st) }.context("cuMemFreeAsync")?;
    // SAFETY: as above.
    unsafe { result::free_async(dy, st) }.context("cuMemFreeAsync")?;
    laps.lap("frees");
    // SAFETY: `st` is a live stream.
    unsafe { result::stream::synchronize(st) }.context("cuStreamSynchronize")?;
    laps.lap("exit");
    Ok(laps.steps)
}

/// A fixed amount of host work (about a microsecond), whose time tells whether the host
/// thread itself runs slower in one variant than in another.
fn cpu_reference() {
    let mut sum = 0u64;
    for i in 0..2000u64 {
        sum = std::hint::black_box(sum.wrapping_add(i * i));
    }
    std::hint::black_box(sum);
}
