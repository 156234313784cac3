//! Shared helpers of the runtime GPU tests of `stream_core`.
//!
//! Every test file (`tests/test_<area>.rs`) is its own test binary with
//! `harness = false`; its `main` is [`test_main!`], which hands the file's test
//! functions to [`libtest_mimic`]. The rules the harness enforces:
//!
//! * A GPU test is reported as **ignored** when `Device::count()` finds no CUDA device,
//!   and runs when there is one.
//! * With `STREAM_CORE_REQUIRE_GPU=1` (what `.gpu/run.sh` sets) a missing GPU is a
//!   **failure** of every GPU test, with a message saying so.
//! * Host tests (`host: [...]`) always run.
//! * A failing test prints the seed of its random data; set `STREAM_CORE_TEST_SEED` to
//!   that value to draw the same data again.
//! * A process that dies of a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE) first prints
//!   `gpu-tests: fatal signal ... while running: <tests>` (`crash_report.rs`), and still
//!   dies of that signal (`test_harness.rs` makes one fault and checks both).
//!
//! The helpers follow the workspace's test rule (STYLE rule 15): draw fresh non-zero
//! inputs ([`Rng`]), poison outputs before the run ([`poisoned`], [`poison`]), and
//! compare against a CPU reference ([`check_eq`]), reporting the first mismatch.
//! Arithmetic kernels are compared within a rounding-error bound instead: inputs from
//! [`signed`], bounds in units of [`Real::U`], checked with [`check_close`].

mod check;
pub mod child;
pub mod chrome_trace;
mod crash_report;
pub mod cudarc_side;
mod element;
mod float;
mod gemm_reference;
mod gpu;
mod gpu_work;
pub mod graph_kernels;
mod harness;
pub mod nccl_graph_step;
pub mod nccl_ranks;
pub mod pool;
pub mod rank_processes;
mod rng;
mod serial;
mod transposed;

pub use check::{check_eq, check_error, expect_err, panic_message, poison, poisoned};
pub use element::Element;
pub use float::{accurate_sum, check_close, signed, summation_height, Real};
pub use gemm_reference::{gemm_reference, SPLIT_SHAPES};
pub use gpu::{
    device, gpu_status, load, require_gpu, sanitizer, stream, GpuStatus, REQUIRE_GPU_ENV,
    SANITIZER_ENV,
};
pub use gpu_work::{round_trip_in, round_trips_on, spin, spin_then_write};
pub use harness::{run, Test, TestFn};
pub use libtest_mimic::Failed;
pub use rng::{Rng, SEED_ENV};
pub use serial::serial;
pub use transposed::transposed;

/// What every test function returns: `Ok(())` on success, a [`Failed`] with a message
/// otherwise. `?` works on `stream_core::Error` (and anything `Display`), since
/// `Failed: From<M: Display>`.
pub type TestResult<T = ()> = Result<T, Failed>;

/// 256 MiB: the size of the "large" transfers, in bytes.
pub const BIG_BYTES: usize = 256 << 20;

/// Returns early from a test with a [`Failed`] carrying the formatted message when the
/// condition does not hold (an `assert!` that reports instead of panicking).
///
/// ```
/// fn check(n: usize) -> gpu_tests::TestResult {
///     gpu_tests::ensure!(n > 2, "expected more than 2 elements, got {n}");
///     Ok(())
/// }
/// assert!(check(3).is_ok());
/// assert!(check(1).is_err());
/// ```
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return ::std::result::Result::Err($crate::Failed::from(::std::format!($($fmt)+)));
        }
    };
}

/// Defines `fn main` of a test binary: the GPU tests (ignored without a GPU) and,
/// optionally, host tests that always run. Each entry is a test function
/// `fn() -> TestResult` named after the behaviour it proves, or `name = expr` to
/// register an instance of a generic function under its own name.
///
/// ```no_run
/// use gpu_tests::TestResult;
///
/// fn upload_is_visible_after_wait() -> TestResult { Ok(()) }
/// fn round_trip<T>() -> TestResult { Ok(()) }
/// fn count_never_panics() -> TestResult { Ok(()) }
///
/// gpu_tests::test_main! {
///     gpu: [upload_is_visible_after_wait, round_trip_u8 = round_trip::<u8>],
///     host: [count_never_panics],
/// }
/// ```
#[macro_export]
macro_rules! test_main {
    (
        gpu: [$($gpu:ident $(= $gpu_fn:expr)?),* $(,)?]
        $(, host: [$($host:ident $(= $host_fn:expr)?),* $(,)?])?
        $(,)?
    ) => {
        fn main() {
            $crate::run(
                &[$($crate::__test!($gpu $(= $gpu_fn)?)),*],
                &[$($($crate::__test!($host $(= $host_fn)?)),*)?],
            )
        }
    };
}

/// A `Vec` of `(name, function)` entries for [`run`], each named after its function:
/// for binaries that choose their tests at run time (a two-GPU test only where there are
/// two GPUs), where [`test_main!`] cannot.
///
/// ```
/// fn works() -> gpu_tests::TestResult { Ok(()) }
/// let list: Vec<gpu_tests::Test> = gpu_tests::tests![works];
/// assert_eq!(list[0].0, "works");
/// ```
#[macro_export]
macro_rules! tests {
    ($($test:ident),* $(,)?) => {
        ::std::vec![$((::std::stringify!($test), $test as $crate::TestFn)),*]
    };
}

/// One `(name, function)` entry of [`test_main!`]. Not for direct use.
#[doc(hidden)]
#[macro_export]
macro_rules! __test {
    ($name:ident) => {
        (::std::stringify!($name), $name as $crate::TestFn)
    };
    ($name:ident = $f:expr) => {
        (::std::stringify!($name), $f as $crate::TestFn)
    };
}

#[cfg(test)]
mod tests;
