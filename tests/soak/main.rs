//! Soak test of `stream_core`: for a set time (10 minutes unless told), several threads,
//! each with its own three streams, run random sequences of allocations, transfers of
//! random sizes (pageable and pinned host memory, whole buffers and sub-ranges, staged
//! above the staging threshold), kernels, fork/join, hand-offs and `DeviceVec`
//! attachments, graph replays with updated scalars, managed memory with prefetches and
//! advice, owned-buffer futures (some dropped early), cudarc conversions and cuBLAS
//! SGEMMs on two streams through one handle, and check every result against the CPU. At the end it prints the operations done, the bytes moved, the
//! errors (the target is none), and the device and pinned memory in use before and
//! after, which must be back at the starting level. It exits with status 1 on any error
//! or leak, 2 when it could not start.
//!
//! Not part of `cargo test`. Run it with
//! `cargo run --release -p gpu-tests --bin soak -- [--minutes 10] [--threads 4]
//! [--seed N] [--max-mib 64] [--progress-secs 30] [--mem-tolerance-mib 64]`, or on a
//! machine without a toolchain `.gpu/bin/soak ...` after `gpu-pack`. `--seconds S`
//! overrides `--minutes` (for short runs, e.g. under compute-sanitizer).
//!
//! Each worker's sequence of operations and data is determined by the seed and its
//! index; the seed is printed first, so a failing run can be replayed (the
//! interleaving of the threads on the GPU differs from run to run).

mod host;
mod kernel_ops;
mod module_ops;
mod ops;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_tests::{panic_message, Failed, Rng};
use stream_core::Device;

use ops::{random_len, Moved, Shared, Worker, OPS};

/// Errors printed in full; later ones are only counted.
const PRINTED_ERRORS: u64 = 20;
/// A worker stops after this many errors of its own (the context may be unusable).
const WORKER_ERROR_LIMIT: u64 = 20;
/// Elements of every worker's long-lived `DeviceVec` (and of the shared one).
const VEC_LEN: usize = 1 << 20;

/// The command line.
#[derive(Debug, Clone)]
struct Config {
    duration: Duration,
    threads: usize,
    seed: u64,
    max_bytes: usize,
    progress: Duration,
    mem_tolerance: usize,
}

const USAGE: &str = "usage: soak [--minutes M] [--seconds S] [--threads N] [--seed N] \
                     [--max-mib M] [--progress-secs S] [--mem-tolerance-mib M]";

impl Config {
    fn parse(args: impl Iterator<Item = String>) -> Result<Config, String> {
        let mut config = Config {
            duration: Duration::from_secs(600),
            threads: 4,
            seed: fresh_seed(),
            max_bytes: 64 << 20,
            progress: Duration::from_secs(30),
            mem_tolerance: 64 << 20,
        };
        let mut args = args.peekable();
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_owned());
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let number = |what: &str| -> Result<f64, String> {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| format!("{what} {value:?} is not a non-negative number"))
            };
            match flag.as_str() {
                "--minutes" => config.duration = Duration::from_secs_f64(number(&flag)? * 60.0),
                "--seconds" => config.duration = Duration::from_secs_f64(number(&flag)?),
                "--threads" => config.threads = (number(&flag)? as usize).max(1),
                "--seed" => {
                    config.seed = parse_seed(&value).ok_or_else(|| {
                        format!("--seed {value:?}: write a decimal or 0x hex number")
                    })?
                }
                "--max-mib" => {
                    config.max_bytes = ((number(&flag)? * 1048576.0) as usize).max(1 << 20)
                }
                "--progress-secs" => {
                    config.progress = Duration::from_secs_f64(number(&flag)?.max(1.0))
                }
                "--mem-tolerance-mib" => {
                    config.mem_tolerance = (number(&flag)? * 1048576.0) as usize
                }
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        Ok(config)
    }
}

fn parse_seed(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.replace('_', "").parse().ok(),
    }
}

fn fresh_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// Counters shared by the workers.
struct Stats {
    ops: [AtomicU64; OPS.len()],
    h2d: AtomicU64,
    d2h: AtomicU64,
    d2d: AtomicU64,
    errors: AtomicU64,
    print: Mutex<()>,
}

impl Stats {
    fn new() -> Self {
        Stats {
            ops: std::array::from_fn(|_| AtomicU64::new(0)),
            h2d: AtomicU64::new(0),
            d2h: AtomicU64::new(0),
            d2d: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            print: Mutex::new(()),
        }
    }

    fn done(&self, op: usize, moved: Moved) {
        self.ops[op].fetch_add(1, Ordering::Relaxed);
        self.h2d.fetch_add(moved.h2d, Ordering::Relaxed);
        self.d2h.fetch_add(moved.d2h, Ordering::Relaxed);
        self.d2d.fetch_add(moved.d2d, Ordering::Relaxed);
    }

    fn error(&self, worker: usize, step: u64, op: &str, message: &str) {
        let n = self.errors.fetch_add(1, Ordering::Relaxed) + 1;
        let _guard = self.print.lock().unwrap_or_else(|p| p.into_inner());
        if n <= PRINTED_ERRORS {
            eprintln!("soak: ERROR {n} (worker {worker}, operation {step}, {op}): {message}");
        } else if n == PRINTED_ERRORS + 1 {
            eprintln!("soak: more errors follow; only their count is reported");
        }
    }

    fn total_ops(&self) -> u64 {
        self.ops.iter().map(|o| o.load(Ordering::Relaxed)).sum()
    }

    fn moved(&self) -> (u64, u64, u64) {
        (
            self.h2d.load(Ordering::Relaxed),
            self.d2h.load(Ordering::Relaxed),
            self.d2d.load(Ordering::Relaxed),
        )
    }
}

fn main() {
    let config = match Config::parse(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("soak: {message}");
            std::process::exit(2);
        }
    };
    match run(&config) {
        Ok(true) => println!("soak: PASS"),
        Ok(false) => {
            println!("soak: FAIL");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("soak: could not run: {}", e.message().unwrap_or("failed"));
            std::process::exit(2);
        }
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

fn mib(bytes: i128) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Device memory in use (bytes of the pool allocated and not freed), after a
/// synchronisation of the housekeeping stream, where dropped `DeviceVec`s are freed.
fn device_used(dev: &Device) -> Result<usize, Failed> {
    drop(dev.alloc_vec::<u8>(0)?); // synchronises the device's housekeeping stream
    Ok(dev.memory_stats()?.in_use_bytes)
}

/// The device pool's and the pinned pool's statistics, for the report.
fn library_memory_stats(dev: &Device) -> Option<String> {
    let device = dev.memory_stats().ok()?;
    let pinned = dev.pinned_memory_stats();
    Some(format!(
        "device pool: {:.1} MiB in use, {:.1} MiB cached, peak {:.1} MiB; pinned pool: {:.1} MiB in use, {:.1} MiB cached, peak {:.1} MiB",
        mib(device.in_use_bytes as i128),
        mib(device.cached_bytes as i128),
        mib(device.peak_in_use_bytes as i128),
        mib(pinned.in_use_bytes as i128),
        mib(pinned.cached_bytes as i128),
        mib(pinned.peak_in_use_bytes as i128),
    ))
}

/// Runs the soak; `Ok(true)` when there were no errors and no memory was left in use.
fn run(config: &Config) -> Result<bool, Failed> {
    let dev = Device::new(0)?;
    println!(
        "soak: {} ({:?}), {} threads x 3 streams, {:.1} minutes, transfers up to {} MiB, \
         seed {:#x} (replay with --seed {:#x})",
        dev.name()?,
        dev.compute_capability(),
        config.threads,
        config.duration.as_secs_f64() / 60.0,
        config.max_bytes >> 20,
        config.seed,
        config.seed
    );
    let mut rng = Rng::with_seed(config.seed);
    let shared_host: Vec<f64> = (0..VEC_LEN)
        .map(|_| rng.below(201) as f64 - 100.0)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| Failed::from(format!("cannot start a tokio runtime: {e}")))?;
    let cudarc_stream = dev
        .cudarc_context()?
        .new_stream()
        .map_err(|e| Failed::from(format!("cudarc cannot make a stream: {e:?}")))?;
    let shared = Shared {
        vec: dev.upload_vec(&shared_host)?,
        host: shared_host,
        runtime,
        cudarc_stream,
    };
    // Warm-up: one of each operation, so that kernels are compiled and loaded before
    // the memory baseline is taken.
    {
        let stats = Stats::new();
        let mut worker = new_worker(&dev, config, &shared, usize::MAX)?;
        for (i, (name, op)) in OPS.iter().enumerate() {
            let moved = op(&mut worker).map_err(|f| {
                Failed::from(format!("warm-up {name}: {}", f.message().unwrap_or("")))
            })?;
            stats.done(i, moved);
        }
    }
    let used_before = device_used(&dev)?;
    let pinned_before = host::pinned_counters().0;
    if let Some(stats) = library_memory_stats(&dev) {
        println!("soak: before: {stats}");
    }

    let stats = Stats::new();
    let start = Instant::now();
    let deadline = start + config.duration;
    std::thread::scope(|t| -> Result<(), Failed> {
        let workers: Vec<_> = (0..config.threads)
            .map(|index| {
                let (dev, stats, shared) = (&dev, &stats, &shared);
                t.spawn(move || work(index, dev, config, shared, stats, deadline))
            })
            .collect();
        let mut last = Instant::now();
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(200));
            if last.elapsed() >= config.progress {
                last = Instant::now();
                progress(&stats, start, &dev);
            }
        }
        for (index, worker) in workers.into_iter().enumerate() {
            if let Err(payload) = worker.join() {
                stats.error(index, 0, "worker", &panic_message(payload.as_ref()));
            }
        }
        Ok(())
    })?;
    let elapsed = start.elapsed();

    drop(shared);
    let used_after = device_used(&dev)?;
    let (pinned_after, pinned_peak, pinned_allocs, pinned_bytes) = host::pinned_counters();
    let (h2d, d2h, d2d) = stats.moved();
    let errors = stats.errors.load(Ordering::Relaxed);
    println!(
        "soak: ran {:.1} s with {} threads, seed {:#x}",
        elapsed.as_secs_f64(),
        config.threads,
        config.seed
    );
    let per_op: Vec<String> = OPS
        .iter()
        .zip(&stats.ops)
        .map(|((name, _), n)| format!("{name} {}", n.load(Ordering::Relaxed)))
        .collect();
    println!(
        "soak: operations: {} ({})",
        stats.total_ops(),
        per_op.join(", ")
    );
    println!(
        "soak: bytes moved: {:.2} GiB (host->device {:.2} GiB, device->host {:.2} GiB, \
         device->device {:.2} GiB)",
        gib(h2d + d2h + d2d),
        gib(h2d),
        gib(d2h),
        gib(d2d)
    );
    println!("soak: errors: {errors}");
    let growth = used_after as i128 - used_before as i128;
    println!(
        "soak: device memory in use (pool): before {:.1} MiB, after {:.1} MiB \
         ({:+.1} MiB; tolerance {:.1} MiB)",
        mib(used_before as i128),
        mib(used_after as i128),
        mib(growth),
        mib(config.mem_tolerance as i128)
    );
    println!(
        "soak: pinned host memory held by this program's buffers: before {pinned_before} B, \
         after {pinned_after} B (peak {:.1} MiB; {pinned_allocs} pinned allocations, \
         {:.2} GiB in all)",
        mib(i128::from(pinned_peak)),
        gib(pinned_bytes)
    );
    if let Some(stats) = library_memory_stats(&dev) {
        println!("soak: after: {stats}");
    }
    let leaked_device = growth > config.mem_tolerance as i128;
    let leaked_pinned = pinned_after != pinned_before;
    if leaked_device {
        println!("soak: device memory in use grew beyond the tolerance");
    }
    if leaked_pinned {
        println!("soak: pinned memory is still held");
    }
    Ok(errors == 0 && !leaked_device && !leaked_pinned)
}

fn progress(stats: &Stats, start: Instant, dev: &Device) {
    let (h2d, d2h, d2d) = stats.moved();
    let free = dev
        .memory_info()
        .map(|(free, _)| format!("{:.1} GiB", gib(free as u64)))
        .unwrap_or_else(|e| format!("unknown ({e})"));
    println!(
        "soak: [{:>5.0} s] {} operations, {:.2} GiB moved, {} errors, device memory free {free}",
        start.elapsed().as_secs_f64(),
        stats.total_ops(),
        gib(h2d + d2h + d2d),
        stats.errors.load(Ordering::Relaxed)
    );
}

/// A worker with its own streams and generator (seeded by the run's seed and `index`).
fn new_worker<'a>(
    dev: &Device,
    config: &Config,
    shared: &'a Shared,
    index: usize,
) -> Result<Worker<'a>, Failed> {
    let mut rng = Rng::with_seed(
        config
            .seed
            .wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    );
    let len = random_len(&mut rng, VEC_LEN).max(1);
    let mirror: Vec<f64> = (0..len).map(|_| rng.below(2001) as f64 - 1000.0).collect();
    Ok(Worker {
        dev: dev.clone(),
        streams: [dev.new_stream()?, dev.new_stream()?, dev.new_stream()?],
        vec: dev.upload_vec(&mirror)?,
        mirror,
        rng,
        max_bytes: config.max_bytes,
        shared,
        graph: None,
        blas: None,
    })
}

/// One worker thread: random operations until the deadline, or until it has seen
/// [`WORKER_ERROR_LIMIT`] errors.
fn work(
    index: usize,
    dev: &Device,
    config: &Config,
    shared: &Shared,
    stats: &Stats,
    deadline: Instant,
) {
    let mut worker = match new_worker(dev, config, shared, index) {
        Ok(worker) => worker,
        Err(f) => {
            stats.error(index, 0, "setup", f.message().unwrap_or("failed"));
            return;
        }
    };
    let mut own_errors = 0;
    let mut step = 0u64;
    while Instant::now() < deadline {
        step += 1;
        let op = worker.rng.below(OPS.len());
        let (name, run) = OPS[op];
        match catch_unwind(AssertUnwindSafe(|| run(&mut worker))) {
            Ok(Ok(moved)) => stats.done(op, moved),
            Ok(Err(failed)) => {
                own_errors += 1;
                stats.error(index, step, name, failed.message().unwrap_or("failed"));
            }
            Err(payload) => {
                own_errors += 1;
                let message = format!("panicked: {}", panic_message(payload.as_ref()));
                stats.error(index, step, name, &message);
            }
        }
        if own_errors >= WORKER_ERROR_LIMIT {
            stats.error(
                index,
                step,
                "worker",
                &format!("stopping after {own_errors} errors"),
            );
            return;
        }
    }
}
