//! Case 3: copies of ordinary (pageable) `Vec` memory in both directions, host time
//! from the call to the end of the stream synchronisation that follows it (the driver
//! may return from a pageable copy before the data has landed, or block until it has:
//! only the time to "data on the device" or "data in the `Vec`" is comparable).
//!
//! Measured in the same rounds, for each size (64 MiB and 1 GiB; 64 MiB with `--quick`)
//! and direction:
//! * **staged** (ours): `s.copy_to_device(&vec, &mut buf)` and
//!   `s.copy_to_host(&buf, &mut vec)?.wait()` in a scope: the library's path for
//!   pageable memory, staged through pinned blocks above its threshold (see
//!   `stream-core/src/staging.rs`). The case checks that every one of these copies
//!   took the staged path (`staged_copy_counts`) and says so under the table otherwise.
//! * **the driver's pageable path** (raw): `cuMemcpyHtoDAsync`/`cuMemcpyDtoHAsync` with
//!   the same kind of `Vec`; and cudarc's `memcpy_htod`/`memcpy_dtoh` with a `Vec` on its
//!   default stream.
//! * **pinned DMA**: the same raw calls with page-locked memory: what the DMA engine
//!   moves, the GPU side's ceiling of a staged copy.
//! * **host memcpy**: pageable into pinned memory (uploads) or pinned into pageable
//!   (downloads) on the machine's parallelism and on 8 threads, in 256 KiB pieces the
//!   threads take in turn (since 2026-11-27; one stripe per thread before): the host
//!   side's ceiling (see [`host_memcpy`]).
//!
//! Rows, per size and direction, each with the staged copy as "ours": against the
//! driver's path (raw, and cudarc); against pinned DMA (raw), held to issue 13's target
//! (at least 0.8x in the median over the rounds and 0.6x in the worst round); and
//! against each host memcpy (raw). Every buffer is checked afterwards: what came back
//! from the device must be what went up.

mod cache_state;
mod contention;
mod host_memcpy;
mod ranks;
mod raw_copy;
mod stragglers;
mod sweep;
mod trace;
mod variables;

use std::cell::RefCell;
use std::time::Instant;

use cudarc::driver::CudaSlice;
use stream_core::staging::staged_copy_counts;
use stream_core::{scope, DeviceVec};

use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::raw::{RawDeviceMem, RawPinned};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::Rounds;
use crate::sampling::{interleaved, Plan, Sampler};
pub use variables::streaming_stores_of_this_run;

/// Issue 13: staged bandwidth / pinned DMA bandwidth, median over the rounds.
const STAGED_OVER_PINNED_MEDIAN: f64 = 0.8;
/// Issue 13: staged bandwidth / pinned DMA bandwidth, worst round.
const STAGED_OVER_PINNED_WORST: f64 = 0.6;

/// The value at element `i` of every buffer that goes up (and must come back).
fn pattern(i: usize) -> f32 {
    (i % 8191) as f32 * 0.5 - 1000.0
}

/// Runs case 3.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let sizes: &[(usize, usize, usize)] = if env.cfg.quick {
        &[(64 * MIB, 1, 3)]
    } else {
        // (bytes, warm-up samples, samples per round)
        &[(64 * MIB, 2, 15), (1024 * MIB, 1, 5)]
    };
    let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = host_memcpy::thread_counts(parallelism);
    if let Some(pinned) = variables::pinned_setting()? {
        stream_core::staging::set_staging_config(pinned);
        rep.note(format!(
            "pageable: BENCH_STAGING_SET pinned the staging setting for every copy (the calibration below still runs, and its choice is not used): {} threads, {} MiB chunks",
            pinned.threads,
            pinned.chunk_bytes / MIB
        ));
    }
    // The staged copies' calibration, run now rather than inside the first sample.
    let t = std::time::Instant::now();
    match stream_core::staging::calibrate_staging_on(&env.dev) {
        Some(cal) => {
            let rules = stream_core::staging::StagingConfig::for_this_machine();
            let line = format!(
                "pageable: staging calibrated in {:.0} ms ({} of {} settings, {}): {} threads, {} MiB chunks, {} downloads; {:.1} / {:.1} GB/s up / down (the rules' {} threads, {} MiB: {:.1} / {:.1})",
                t.elapsed().as_secs_f64() * 1e3,
                cal.measured,
                cal.planned,
                if cal.composed { "staged copies to the device" } else { "host half alone" },
                cal.config.threads,
                cal.config.chunk_bytes >> 20,
                if cal.streaming_downloads { "streaming" } else { "ordinary-store" },
                cal.chosen_gbs.0,
                cal.chosen_gbs.1,
                rules.effective().threads,
                rules.chunk_bytes >> 20,
                cal.rules_gbs.0,
                cal.rules_gbs.1,
            );
            println!("{line}");
            rep.note(line);
        }
        None => rep.note(format!(
            "pageable: staging not calibrated ({}=0, or an unoptimised build): the rules' setting",
            stream_core::staging::CALIBRATE_ENV
        )),
    }
    for &(bytes, warmup, reps) in sizes {
        let mut buffers = Buffers::new(env, bytes)?;
        for up in [true, false] {
            if !up {
                buffers.poison_host();
            }
            measure(
                env,
                rep,
                &mut buffers,
                up,
                &threads,
                env.cfg.plan(warmup, reps),
            )?;
        }
        buffers.check()?;
    }
    rep.note(format!(
        "pageable: ours is the library's staged path (`copy_to_device` from / `copy_to_host` into a `Vec`), host time to the data's arrival; raw is what the row names: the driver's pageable path (cudarc 1s: cudarc's), pinned DMA (`cuMemcpy*Async` with pinned memory, host time), or a host memcpy from pageable into pinned memory (uploads) or back (downloads) on {} threads (this machine has {parallelism}) in 256 KiB pieces the threads take in turn, timed from the first thread's start to the last one's end",
        threads
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" or ")
    ));
    if std::env::var_os("BENCH_STAGING_CACHE").is_some() {
        cache_state::run(env)?;
    }
    if std::env::var_os("BENCH_STAGING_CONTENTION").is_some() {
        contention::run(env)?;
    }
    if std::env::var_os("BENCH_STAGING_RANKS").is_some() {
        ranks::run()?;
    }
    if std::env::var_os("BENCH_STAGING_STRAGGLERS").is_some() {
        stragglers::run()?;
    }
    if std::env::var_os("BENCH_STAGING_SWEEP").is_some() {
        sweep::run(env)?;
    }
    if let Some(dir) = std::env::var_os("BENCH_STAGING_TRACE") {
        trace::run(env, std::path::Path::new(&dir))?;
    }
    Ok(())
}

/// The memory of one size: for each implementation a pageable `Vec` and device memory,
/// and the pinned buffers of the two ceilings.
struct Buffers {
    bytes: usize,
    ours_host: Vec<f32>,
    ours_device: DeviceVec<f32>,
    raw_host: Vec<f32>,
    raw_device: RawDeviceMem,
    cudarc_host: Vec<f32>,
    cudarc_device: CudaSlice<f32>,
    pinned_host: RawPinned,
    pinned_device: RawDeviceMem,
    memcpy: RefCell<MemcpyBuffers>,
}

/// The two sides of the host memcpy ceiling.
struct MemcpyBuffers {
    pageable: Vec<f32>,
    pinned: RawPinned,
}

impl MemcpyBuffers {
    /// Host seconds of a memcpy on `threads` threads: pageable into pinned when `up`,
    /// pinned into pageable otherwise.
    fn copy(&mut self, up: bool, threads: usize) -> Result<f64> {
        if up {
            host_memcpy::parallel_copy(self.pinned.as_mut_slice(), &self.pageable, threads)
        } else {
            host_memcpy::parallel_copy(&mut self.pageable, self.pinned.as_slice(), threads)
        }
    }
}

impl Buffers {
    /// Host buffers written in full with [`pattern`] (so that no page fault is timed),
    /// the memcpy's pinned side poisoned.
    fn new(env: &Env, bytes: usize) -> Result<Self> {
        let n = bytes / 4;
        let filled = || -> Vec<f32> { (0..n).map(pattern).collect() };
        let mut pinned_host = RawPinned::new(n)?;
        pinned_host
            .as_mut_slice()
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = pattern(i));
        let mut memcpy_pinned = RawPinned::new(n)?;
        memcpy_pinned.as_mut_slice().fill(f32::NAN);
        let cu = &env.cu1;
        let cudarc_device = cu.alloc_zeros(n).context("cudarc: alloc_zeros")?;
        cu.synchronize().context("cudarc: synchronize")?;
        Ok(Buffers {
            bytes,
            ours_host: filled(),
            ours_device: env.dev.alloc_vec(n)?,
            raw_host: filled(),
            raw_device: RawDeviceMem::new(bytes)?,
            cudarc_host: filled(),
            cudarc_device,
            pinned_host,
            pinned_device: RawDeviceMem::new(bytes)?,
            memcpy: RefCell::new(MemcpyBuffers {
                pageable: filled(),
                pinned: memcpy_pinned,
            }),
        })
    }

    /// Every host buffer a download writes set to NaN, so that a download that did not
    /// happen is caught by [`check`](Self::check).
    fn poison_host(&mut self) {
        self.ours_host.fill(f32::NAN);
        self.raw_host.fill(f32::NAN);
        self.cudarc_host.fill(f32::NAN);
        self.pinned_host.as_mut_slice().fill(f32::NAN);
        self.memcpy.get_mut().pageable.fill(f32::NAN);
    }

    /// After an upload and a download: every host buffer holds [`pattern`] again
    /// (checked at every 4099th element and the last).
    fn check(&mut self) -> Result<()> {
        let memcpy = self.memcpy.get_mut();
        for (who, host) in [
            ("ours", &self.ours_host[..]),
            ("raw", &self.raw_host[..]),
            ("cudarc", &self.cudarc_host[..]),
            ("raw, pinned", self.pinned_host.as_slice()),
            ("host memcpy", &memcpy.pageable[..]),
        ] {
            let last = host.len().saturating_sub(1);
            for i in (0..host.len()).step_by(4099).chain([last]) {
                if host[i].to_bits() != pattern(i).to_bits() {
                    return Err(Error::msg(format!(
                        "pageable, {} MiB, {who}: element {i} came back as {} instead of {}",
                        self.bytes / MIB,
                        host[i],
                        pattern(i)
                    )));
                }
            }
        }
        Ok(())
    }
}

/// One size and direction: every implementation and ceiling in the same rounds, then
/// the rows.
fn measure(
    env: &Env,
    rep: &mut Report,
    b: &mut Buffers,
    up: bool,
    threads: &[usize],
    plan: Plan,
) -> Result<()> {
    let bytes = b.bytes;
    let ours_stream = &env.streams[0];
    let raw_stream = env.raw_streams[0].0;
    let cu = &env.cu1;
    let staged_before = staged_copy_counts();
    let times = {
        let Buffers {
            ours_host,
            ours_device,
            raw_host,
            raw_device,
            cudarc_host,
            cudarc_device,
            pinned_host,
            pinned_device,
            memcpy,
            ..
        } = b;
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "ours, staged",
                Box::new(|| {
                    let t = Instant::now();
                    scope(ours_stream, |s| {
                        let mut d = s.attach(&mut *ours_device)?;
                        if up {
                            s.copy_to_device(&*ours_host, &mut d)?;
                        } else {
                            s.copy_to_host(&d, &mut *ours_host)?.wait()?;
                        }
                        Ok::<_, Error>(())
                    })?;
                    Ok(t.elapsed().as_secs_f64())
                }),
            ),
            (
                "raw, pageable",
                Box::new(|| raw_copy::timed(raw_stream, up, raw_device, raw_host)),
            ),
            (
                "cudarc, pageable",
                Box::new(|| {
                    let t = Instant::now();
                    if up {
                        cu.memcpy_htod(&*cudarc_host, &mut *cudarc_device)
                            .context("cudarc: memcpy_htod")?;
                    } else {
                        cu.memcpy_dtoh(&*cudarc_device, &mut *cudarc_host)
                            .context("cudarc: memcpy_dtoh")?;
                    }
                    cu.synchronize().context("cudarc: synchronize")?;
                    Ok(t.elapsed().as_secs_f64())
                }),
            ),
            (
                "raw, pinned",
                Box::new(|| {
                    raw_copy::timed(raw_stream, up, pinned_device, pinned_host.as_mut_slice())
                }),
            ),
        ];
        let memcpy = &*memcpy;
        for &t in threads {
            samplers.push((
                "host memcpy",
                Box::new(move || memcpy.borrow_mut().copy(up, t)),
            ));
        }
        interleaved(plan, &mut samplers)?
    };
    let staged_after = staged_copy_counts();
    let staged = if up {
        staged_after.0 - staged_before.0
    } else {
        staged_after.1 - staged_before.1
    };
    let ours_copies = (plan.warmup + plan.rounds * plan.samples) as u64;

    let gbs: Vec<Rounds> = times
        .iter()
        .map(|t| t.map(|s| bytes as f64 / s / 1e9))
        .collect();
    let [ours, driver, cudarc, pinned, memcpys @ ..] = &gbs[..] else {
        return Err(Error::msg("pageable: expected at least four results"));
    };
    let dir = if up {
        "host-to-device"
    } else {
        "device-to-host"
    };
    let what = format!("pageable {dir}, {} MiB", bytes / MIB);
    if staged < ours_copies {
        rep.note(format!(
            "pageable: WARNING: {what}: only {staged} of ours' {ours_copies} copies took the staged path; its rows measure a mix with the driver's path"
        ));
    }
    let staged_row = |name: String| {
        let mut row = Row::new("pageable", name, "GB/s", Better::Higher);
        row.ours = Some(ours.clone());
        row
    };

    let mut row = staged_row(format!("{what}: vs the driver's path"));
    (row.raw, row.cudarc1) = (Some(driver.clone()), Some(cudarc.clone()));
    rep.push(row);

    let mut row = staged_row(format!("{what}: vs pinned DMA"));
    row.raw = Some(pinned.clone());
    rep.push(row.check_vs_raw_with_worst(
        STAGED_OVER_PINNED_MEDIAN,
        STAGED_OVER_PINNED_WORST,
        Source::Issue,
    ));

    for (t, memcpy) in threads.iter().zip(memcpys) {
        let mut row = staged_row(format!("{what}: vs host memcpy, {t} threads"));
        row.raw = Some(memcpy.clone());
        rep.push(row);
    }
    Ok(())
}

/// One staged copy of the diagnoses (`sweep`, `trace`): `src` into `device` or `device`
/// into `dst`, in a scope of its own on `stream`.
struct StagedCopy<'a> {
    stream: &'a stream_core::Stream,
    device: &'a mut DeviceVec<f32>,
    src: &'a [f32],
    dst: &'a mut [f32],
}

impl StagedCopy<'_> {
    /// Host seconds of the copy up (`upload`) or down with `config`, to the end of its
    /// scope, recorded into `trace` when one is given.
    fn seconds(
        &mut self,
        config: stream_core::staging::StagingConfig,
        upload: bool,
        trace: Option<&stream_core::trace::Trace>,
    ) -> Result<f64> {
        let t = Instant::now();
        stream_core::staging::with_staging_config(config, || {
            scope(self.stream, |s| {
                if let Some(trace) = trace {
                    s.trace_into(trace)?;
                }
                let mut d = s.attach(&mut *self.device)?;
                if upload {
                    s.copy_to_device(self.src, &mut d)?;
                } else {
                    s.copy_to_host(&d, &mut *self.dst)?.wait()?;
                }
                Ok::<_, Error>(())
            })
        })?;
        Ok(t.elapsed().as_secs_f64())
    }
}
