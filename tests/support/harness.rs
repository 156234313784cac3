//! The test runner: [`libtest_mimic`] trials, ignored (or failed) without a GPU.

use std::panic::{catch_unwind, AssertUnwindSafe};

use libtest_mimic::{Arguments, Failed, Trial};

use crate::check::panic_message;
use crate::crash_report;
use crate::gpu::{gpu_status, require_gpu, GpuStatus, REQUIRE_GPU_ENV};
use crate::rng;

/// A test function: `Ok(())` when the behaviour it names holds.
pub type TestFn = fn() -> Result<(), Failed>;

/// A test's name (what `--list` prints and filters match) and its function.
pub type Test = (&'static str, TestFn);

/// Runs the tests of one binary and exits with libtest's exit code.
///
/// `gpu` tests are flagged ignored when no CUDA device is found, unless
/// `STREAM_CORE_REQUIRE_GPU=1`; when they run without a GPU (that variable, or
/// `--include-ignored`/`--ignored`), each fails with a message naming the reason.
/// `host` tests always run. Every test runs under `catch_unwind`, and a failure
/// reports the seed of the test's random data.
pub fn run(gpu: &[Test], host: &[Test]) -> ! {
    let args = Arguments::from_args();
    crash_report::install();
    let status = gpu_status();
    let require = require_gpu();
    if let GpuStatus::Absent(reason) = status {
        if !args.list && !gpu.is_empty() {
            if require {
                eprintln!(
                    "gpu-tests: {REQUIRE_GPU_ENV}=1 but there is no usable CUDA GPU ({reason}): \
                     the {} GPU tests of this binary fail",
                    gpu.len()
                );
            } else {
                eprintln!(
                    "gpu-tests: no usable CUDA GPU ({reason}): the {} GPU tests of this binary \
                     are reported as ignored; set {REQUIRE_GPU_ENV}=1 to make them fail instead",
                    gpu.len()
                );
            }
        }
    }
    let ignore_gpu_tests = !status.is_present() && !require;
    let trials = gpu
        .iter()
        .map(|&(name, test)| {
            Trial::test(name, move || run_one(name, test, true)).with_ignored_flag(ignore_gpu_tests)
        })
        .chain(
            host.iter()
                .map(|&(name, test)| Trial::test(name, move || run_one(name, test, false))),
        )
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    crate::gpu::release_device();
    conclusion.exit()
}

/// Runs one test on the current thread: refuses GPU tests without a GPU, turns a panic
/// into a failure, and adds the random seed to any failure's message, which it also
/// prints at once (libtest prints failures only at the end, which a binary killed by a
/// time limit never reaches).
fn run_one(name: &'static str, test: TestFn, needs_gpu: bool) -> Result<(), Failed> {
    if needs_gpu {
        if let GpuStatus::Absent(reason) = gpu_status() {
            let why = if require_gpu() {
                format!("{REQUIRE_GPU_ENV}=1 requires one")
            } else {
                "it was run with --include-ignored or --ignored".to_owned()
            };
            return Err(Failed::from(format!(
                "no CUDA GPU: {reason}. This GPU test fails instead of being ignored because \
                 {why}: run it on a machine with an NVIDIA GPU and its driver, or leave \
                 {REQUIRE_GPU_ENV} unset (and --include-ignored off) to report it as ignored"
            )));
        }
    }
    let _running = crash_report::Running::enter(name);
    rng::begin_test()?;
    let outcome = match catch_unwind(AssertUnwindSafe(test)) {
        Ok(result) => result,
        Err(payload) => Err(Failed::from(format!(
            "the test panicked: {}",
            panic_message(payload.as_ref())
        ))),
    };
    outcome.map_err(|failed| {
        let message = failed.message().unwrap_or("the test failed");
        let message = match rng::seed_note() {
            Some(note) => format!("{message}\n{note}"),
            None => message.to_owned(),
        };
        eprintln!("gpu-tests: {name} failed: {message}");
        Failed::from(message)
    })
}
