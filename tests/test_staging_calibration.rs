//! The calibration of staged copies (`stream_core::staging::calibrate_staging`): with
//! it on, the first staged copy calibrates and both ways stay byte-exact; with it off
//! (`STREAM_CORE_STAGING_CALIBRATE=0`) nothing is measured; a setting the program pinned
//! with `set_staging_config` is used as it is, and never calibrated.
//!
//! The calibration runs once per process and reads its environment variable then, so
//! each case runs in a child process (this binary with `STREAM_CORE_CALIBRATION_CASE`),
//! which prints `key = value` lines that the parent checks.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use gpu_tests::child::{run_self, ChildOutput};
use gpu_tests::{ensure, tests, Test, TestResult};

/// The environment variable that makes this binary run one case as a child.
const CASE_ENV: &str = "STREAM_CORE_CALIBRATION_CASE";
/// The library's switch.
const CALIBRATE_ENV: &str = stream_core::staging::CALIBRATE_ENV;

fn main() {
    if let Ok(case) = std::env::var(CASE_ENV) {
        std::process::exit(child::run(&case));
    }
    let gpu: Vec<Test> = tests![
        the_first_staged_copy_calibrates_and_both_ways_stay_exact,
        calibration_turned_off_measures_nothing,
        a_pinned_setting_is_used_and_never_calibrated,
        four_threads_whose_first_staged_copies_start_together_all_arrive_exact,
        the_calibration_waits_for_no_work_of_the_users_stream,
        a_first_staged_copy_on_a_nearly_full_device_calibrates_and_arrives_exact,
    ];
    gpu_tests::run(&gpu, &[])
}

/// Held by each child while it runs: shared, but exclusive for the case that fills the
/// device (`full`), whose filler would leave the other children's copies and trials
/// without device memory (the tests run in parallel).
static DEVICE_MEMORY: RwLock<()> = RwLock::new(());

/// The child for `case` with the calibration switch at `calibrate`.
fn run_case(case: &str, calibrate: &str) -> TestResult<ChildOutput> {
    let _exclusive;
    let _shared;
    if case == "full" {
        _exclusive = DEVICE_MEMORY
            .write()
            .unwrap_or_else(PoisonError::into_inner);
    } else {
        _shared = DEVICE_MEMORY.read().unwrap_or_else(PoisonError::into_inner);
    }
    run_self(
        &format!("calibration case {case}"),
        &[(CASE_ENV, Some(case)), (CALIBRATE_ENV, Some(calibrate))],
        Duration::from_secs(120),
    )
}

/// Checks that the child `run` reports a calibration, after `what`.
fn ensure_calibrated(run: &ChildOutput, what: &str) -> TestResult {
    let calibrated = run.value("calibrated")?;
    ensure!(
        calibrated != "none",
        "no calibration after {what} with {CALIBRATE_ENV}=1"
    );
    Ok(())
}

/// Calibration on: after one staged upload and one staged download of 64 MiB of
/// pageable memory, a calibration exists (its setting measured, positive figures, the
/// rules' thresholds), both copies were staged and every byte arrived.
fn the_first_staged_copy_calibrates_and_both_ways_stay_exact() -> TestResult {
    let run = run_case("copy", "1")?;
    run.expect("before", "none")?;
    run.expect("exact", "yes")?;
    run.expect("staged", "1 1")?;
    ensure_calibrated(&run, "a staged copy")?;
    // A staged copy has a device: the trials are real staged copies to it.
    run.expect("composed", "yes")?;
    let gbs: Vec<f64> = run
        .value("gbs")?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(
        gbs.len() == 2 && gbs.iter().all(|g| *g > 0.0),
        "the calibration's figures are {gbs:?}"
    );
    println!(
        "calibration {} ms ({} settings; setup {}) on an idle device",
        run.value("calibration_ms")?,
        run.value("settings")?,
        run.value("setup_ms")?
    );
    Ok(())
}

/// Calibration off: the same copies, exact and staged, and no calibration.
fn calibration_turned_off_measures_nothing() -> TestResult {
    let run = run_case("copy", "0")?;
    run.expect("exact", "yes")?;
    run.expect("staged", "1 1")?;
    run.expect("calibrated", "none")
}

/// A setting pinned before the first copy (one thread, 1 MiB chunks): the copies use it
/// (exact, staged), and the calibration never runs even with the switch on.
fn a_pinned_setting_is_used_and_never_calibrated() -> TestResult {
    let run = run_case("pinned", "1")?;
    run.expect("exact", "yes")?;
    run.expect("staged", "1 1")?;
    run.expect("calibrated", "none")
}

/// Four threads, each with a stream of its own, start their first staged copies at the
/// same moment with calibration on: one of them calibrates while the others wait for
/// it, and every thread's copies are staged and exact.
fn four_threads_whose_first_staged_copies_start_together_all_arrive_exact() -> TestResult {
    let run = run_case("threads", "1")?;
    for thread in 0..4 {
        run.expect(&format!("exact_{thread}"), "yes")?;
        run.expect(&format!("staged_{thread}"), "1 1")?;
    }
    ensure_calibrated(&run, "four threads' staged copies")
}

/// The first staged upload of the process goes to a stream still running a long kernel
/// (about two seconds): the calibration it starts runs its trial copies on an internal
/// stream, so neither it nor the upload waits for that kernel; the call returns while
/// the kernel still runs, and the upload, ordered after the kernel, still arrives exact.
/// A wait would end with the kernel, a few milliseconds before the scope does (the
/// upload and download after it), so the call must return at least 0.5 s before the
/// scope's end: room for the calibration of this unoptimised build, which took up to
/// 0.42 s on a 16-core H100 host while its trial memory was still filled byte by byte.
/// (Under a sanitizer a launch returns only once its kernel ran, so only exactness is
/// checked there.)
fn the_calibration_waits_for_no_work_of_the_users_stream() -> TestResult {
    let run = run_case("busy", "1")?;
    run.expect("exact", "yes")?;
    run.expect("composed", "yes")?;
    let (returned, spin): (f64, f64) = (
        run.value("returned_ms")?.parse()?,
        run.value("spin_ms")?.parse()?,
    );
    if gpu_tests::sanitizer().is_none() {
        let took: f64 = run.value("calibration_ms")?.parse()?;
        println!(
            "calibration {took:.0} ms ({} settings); the upload returned at {returned:.0} ms, the scope ended at {spin:.0} ms",
            run.value("settings")?
        );
        ensure!(
            spin > 1500.0,
            "the kernel took {spin:.0} ms: too short to tell a wait from none"
        );
        ensure!(
            returned < spin - 500.0,
            "the first staged upload (with its calibration, {took:.0} ms) returned after \
             {returned:.0} ms, while the kernel before it on the stream took {spin:.0} ms: \
             something waited for it"
        );
    }
    Ok(())
}

/// The first staged copies of the process run with the device nearly full (48 MiB left,
/// less than the calibration's 64 MiB of trial memory): the calibration still ends (with
/// the host half alone when its device memory cannot be had), and both copies arrive
/// exact. (Under a sanitizer the device is not filled: the tools keep state of their own
/// in device memory.)
fn a_first_staged_copy_on_a_nearly_full_device_calibrates_and_arrives_exact() -> TestResult {
    let run = run_case("full", "1")?;
    run.expect("exact", "yes")?;
    if gpu_tests::sanitizer().is_none() {
        ensure!(
            run.value("filled_mib")?.parse::<usize>()? > 0,
            "the device was not filled"
        );
    }
    ensure_calibrated(&run, "staged copies on a nearly full device")?;
    let composed = run.value("composed")?;
    ensure!(
        composed == "yes" || composed == "no",
        "composed = {composed}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The cases (child side).

mod child {
    use gpu_tests::Rng;
    use stream_core::staging::{
        set_staging_config, staged_copy_counts, staging_calibration, StagingConfig,
    };
    use stream_core::{scope, Device, Error, Stream};

    /// 64 MiB of `u32`.
    const LEN: usize = 16 << 20;

    /// Runs `case`, printing its lines; the exit status is 0 unless setup failed.
    pub fn run(case: &str) -> i32 {
        match run_case(case) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("calibration case {case}: {e}");
                1
            }
        }
    }

    fn run_case(case: &str) -> Result<(), Error> {
        if case == "threads" {
            return threads();
        }
        if case == "busy" {
            return busy();
        }
        if case == "full" {
            return full();
        }
        if case == "pinned" {
            set_staging_config(StagingConfig {
                threads: 1,
                chunk_bytes: 1 << 20,
                ..StagingConfig::for_this_machine()
            });
        }
        println!("before = {}", describe());
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let (exact, (up, down)) = round_trip(&stream, &input)?;
        println!("staged = {up} {down}");
        println!("exact = {}", if exact { "yes" } else { "no" });
        print_calibration();
        Ok(())
    }

    /// The process's calibration in a line, or `none`.
    fn describe() -> String {
        match staging_calibration() {
            None => "none".to_owned(),
            Some(c) => format!(
                "{} threads, {} B chunks, streaming downloads {}",
                c.config.threads, c.config.chunk_bytes, c.streaming_downloads
            ),
        }
    }

    /// Prints `calibrated` (see [`describe`]) and, when there is a calibration, its
    /// figures (`gbs`) and whether its trials were real staged copies (`composed`).
    fn print_calibration() {
        println!("calibrated = {}", describe());
        if let Some(c) = staging_calibration() {
            println!("gbs = {} {}", c.chosen_gbs.0, c.chosen_gbs.1);
            println!("calibration_ms = {}", c.took.as_secs_f64() * 1e3);
            println!("settings = {} of {}", c.measured, c.planned);
            println!(
                "setup_ms = {} first_trial_ms = {}",
                c.setup.as_secs_f64() * 1e3,
                c.first_trial.as_secs_f64() * 1e3
            );
            println!("composed = {}", if c.composed { "yes" } else { "no" });
        }
    }

    /// The first staged copies with all but 48 MiB of the device's free memory taken.
    fn full() -> Result<(), Error> {
        const MIB: usize = 1 << 20;
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN / 4);
        let mut output = vec![0u32; LEN / 4];
        scope(&stream, |s| {
            let mut x = s.alloc::<u32>(input.len())?;
            let (free, _) = dev.memory_info()?;
            let filler_bytes = match gpu_tests::sanitizer() {
                Some(_) => 0,
                None => free.saturating_sub(48 * MIB) / (2 * MIB) * (2 * MIB),
            };
            let _filler = s.alloc::<u8>(filler_bytes)?;
            println!("filled_mib = {}", filler_bytes / MIB);
            s.copy_to_device(&input, &mut x)?;
            s.copy_to_host(&x, &mut output)?.wait()?;
            Ok::<_, Error>(())
        })?;
        println!("exact = {}", if input == output { "yes" } else { "no" });
        print_calibration();
        Ok(())
    }

    /// The first staged upload behind a long kernel on the same stream: how long the
    /// call took, how long the kernel ran, whether the data arrived.
    fn busy() -> Result<(), Error> {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        // 16 MiB: fewer chunks than the ring has blocks (at least 8 MiB each), so the
        // upload itself never waits for a block whose DMA is behind the kernel.
        let input: Vec<u32> = Rng::new().vec(LEN / 4);
        let mut output = vec![0u32; LEN / 4];
        let t = std::time::Instant::now();
        let mut returned = 0.0;
        scope(&stream, |s| {
            gpu_tests::spin(s, gpu_tests::load(4_000_000_000, 2_000_000_000) as u64)?;
            let x = s.upload(&input)?;
            returned = t.elapsed().as_secs_f64() * 1e3;
            s.copy_to_host(&x, &mut output)?.wait()?;
            Ok::<_, Error>(())
        })?;
        // The scope's end waited for the kernel, the upload and the download.
        let spin = t.elapsed().as_secs_f64() * 1e3;
        println!("returned_ms = {returned}");
        println!("spin_ms = {spin}");
        println!("exact = {}", if input == output { "yes" } else { "no" });
        print_calibration();
        Ok(())
    }

    /// Whether a round trip came back exact, and how many uploads and downloads it staged.
    type RoundTrip = (bool, (u64, u64));

    /// `input` uploaded and downloaded again in one scope on `stream`: whether it came
    /// back exact, and how many uploads and downloads this thread staged meanwhile.
    fn round_trip(stream: &Stream, input: &[u32]) -> Result<RoundTrip, Error> {
        let mut output = vec![0u32; input.len()];
        let (up0, down0) = staged_copy_counts();
        scope(stream, |s| {
            let x = s.upload(input)?;
            s.copy_to_host(&x, &mut output)?.wait()?;
            Ok::<_, Error>(())
        })?;
        let (up1, down1) = staged_copy_counts();
        Ok((input == output, (up1 - up0, down1 - down0)))
    }

    /// Four threads, one stream each, released together by a barrier: a staged upload
    /// and download of `LEN / 4` elements each.
    fn threads() -> Result<(), Error> {
        let dev = Device::new(0)?;
        let barrier = std::sync::Barrier::new(4);
        let results: Vec<Result<RoundTrip, Error>> = std::thread::scope(|t| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let (dev, barrier) = (&dev, &barrier);
                    t.spawn(move || -> Result<RoundTrip, Error> {
                        let stream = dev.new_stream()?;
                        let input: Vec<u32> = Rng::new().vec(LEN / 4);
                        barrier.wait();
                        round_trip(&stream, &input)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for (thread, result) in results.into_iter().enumerate() {
            let (exact, (up, down)) = result?;
            println!("exact_{thread} = {}", if exact { "yes" } else { "no" });
            println!("staged_{thread} = {up} {down}");
        }
        print_calibration();
        Ok(())
    }
}
