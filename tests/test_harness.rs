//! The test harness's own promises that a GPU test relies on to be diagnosed
//! (`support/crash_report.rs`): a test binary that dies of a fault first names the tests
//! that were running, and still dies of that signal. Runs everywhere (a host test): the
//! fault is made in a child process, this binary run again with [`FAULT_CHILD`] set.

#![allow(unsafe_code)]

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use gpu_tests::child::run_self;
use gpu_tests::{ensure, Test, TestFn, TestResult};

/// Set in the child: its harness runs only [`faults_on_purpose`].
const FAULT_CHILD: &str = "GPU_TESTS_FAULT_CHILD";

fn main() {
    if std::env::var_os(FAULT_CHILD).is_some() {
        gpu_tests::run(&[], &[("faults_on_purpose", faults_on_purpose as TestFn)]);
    }
    let host: [Test; 1] = [(
        "a_fault_names_the_running_test_and_kills_with_its_signal",
        a_fault_names_the_running_test_and_kills_with_its_signal,
    )];
    gpu_tests::run(&[], &host)
}

/// The child's harness runs one test that reads a page mapped without access: the
/// process must print `gpu-tests: fatal signal SIGSEGV while running: faults_on_purpose`
/// and then die of SIGSEGV (status 139 in a shell), as it would without the report.
fn a_fault_names_the_running_test_and_kills_with_its_signal() -> TestResult {
    let run = run_self(
        "a child whose test faults",
        &[(FAULT_CHILD, Some("1"))],
        Duration::from_secs(60),
    )?;
    ensure!(
        run.status.signal() == Some(libc::SIGSEGV),
        "the child ended with {:?}, not SIGSEGV; stderr:\n{}",
        run.status,
        run.stderr
    );
    let line = "gpu-tests: fatal signal SIGSEGV while running: faults_on_purpose";
    ensure!(
        run.stderr.contains(line),
        "the child's stderr lacks {line:?}:\n{}",
        run.stderr
    );
    Ok(())
}

/// Reads a page mapped with no access: the read faults (SIGSEGV), which is the point.
/// Returns only if the mapping fails.
fn faults_on_purpose() -> TestResult {
    let page = 4096;
    // SAFETY: a new private anonymous mapping of one page, at an address the kernel
    // chooses; nothing else is touched.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(at != libc::MAP_FAILED, "mmap of one page failed");
    // SAFETY: `at` is the start of the live, page-aligned mapping just made; the read is
    // volatile so that it happens, and it traps (PROT_NONE): the process dies of SIGSEGV
    // before it returns.
    let read = unsafe { std::ptr::read_volatile(at.cast::<u8>()) };
    Err(format!("reading a PROT_NONE page returned {read}").into())
}
