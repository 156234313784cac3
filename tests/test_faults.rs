//! Kernel faults, and how a scope ends after one (`stream-core/src/scope/exit.rs`,
//! `release_or_abort` in `device/stream.rs`).
//!
//! A kernel that traps, or writes through an address that is not memory, makes its
//! scope return an `Err` that names the CUDA error and says the context is unusable;
//! every later call on the device returns an error instead of hanging; no host memory
//! is left half-written; and a panic while the fault is pending aborts the process with
//! the documented message instead of unwinding past running DMA.
//!
//! A fault leaves the CUDA context unusable for the rest of the process, so every
//! scenario runs in a child process: this binary runs itself again with
//! `STREAM_CORE_FAULT_SCENARIO=<scenario>`, the child prints one `key = value` line per
//! observation, and the test checks the child's exit status and lines. A child that
//! runs past [`CHILD_LIMIT`] is killed, and its test fails: a call hung.
//!
//! What a host buffer holds after a fault, as the tests check it:
//! * a download enqueued on the same stream *before* the faulting kernel is complete
//!   (the kernel starts only after it);
//! * a download enqueued *after* it, or on a stream joined after it, never runs (the
//!   context stops at the fault): the buffer is untouched;
//! * a download running on an unrelated stream when the fault hits may stop part-way;
//!   its `Pending::wait` and its scope return the fault's error, which is the signal not
//!   to trust that buffer. (Not tested: the outcome depends on timing.)
//!
//! compute-sanitizer would report these faults (they are the point), so
//! `scripts/sanitize.sh` skips this binary.

use std::time::Duration;

use gpu_tests::child::{any_error, describe, exited_normally, fault_error, report, ChildOutput};
use gpu_tests::{ensure, poison, poisoned, Element, Rng, Test, TestFn, TestResult};
use stream_core::{kernel, scope, Device, Error, LaunchConfig, Scope, Stream};

/// The environment variable that makes this binary run one fault scenario as a child.
const SCENARIO_ENV: &str = "STREAM_CORE_FAULT_SCENARIO";

/// How long a child may run: opening the device, compiling two kernels and moving a few
/// hundred MiB take seconds; a minute more means a call hung.
const CHILD_LIMIT: Duration = Duration::from_secs(90);

/// The abort message of `scope` when its stream cannot be synchronised while unwinding.
const ABORT_MESSAGE: &str = "stream_core: aborting: a scope is unwinding from a panic";

/// What `__trap()` is reported as: `CUDA_ERROR_LAUNCH_FAILED` on an H200 with driver 580;
/// the name has depended on the GPU generation.
const TRAP_ERRORS: &[&str] = &["CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION"];

/// What a store to an unmapped address is reported as.
const ILLEGAL_ADDRESS_ERRORS: &[&str] = &["CUDA_ERROR_ILLEGAL_ADDRESS"];

fn main() {
    if let Ok(scenario) = std::env::var(SCENARIO_ENV) {
        std::process::exit(child::run(&scenario));
    }
    let gpu: &[Test] = &[
        (
            "trapping_kernel_fails_its_scope_and_every_later_call_without_hanging",
            trapping_kernel_fails_its_scope_and_every_later_call_without_hanging as TestFn,
        ),
        (
            "illegal_address_write_fails_its_scope_and_every_later_call_without_hanging",
            illegal_address_write_fails_its_scope_and_every_later_call_without_hanging,
        ),
        (
            "trap_in_a_forked_child_fails_the_fork_or_its_parent_scope",
            trap_in_a_forked_child_fails_the_fork_or_its_parent_scope,
        ),
        (
            "panic_in_a_scope_whose_kernel_faulted_aborts_the_process",
            panic_in_a_scope_whose_kernel_faulted_aborts_the_process,
        ),
        (
            "trap_in_a_run_owned_closure_is_the_futures_error_and_releases_dropped_futures",
            trap_in_a_run_owned_closure_is_the_futures_error_and_releases_dropped_futures,
        ),
        (
            "trap_on_head_of_line_bypass_streams_is_the_futures_error_and_releases_dropped_futures",
            trap_on_head_of_line_bypass_streams_is_the_futures_error_and_releases_dropped_futures,
        ),
        (
            "trap_with_the_completion_thread_polling_is_the_futures_error_and_releases_dropped_futures",
            trap_with_the_completion_thread_polling_is_the_futures_error_and_releases_dropped_futures,
        ),
    ];
    gpu_tests::run(gpu, &[])
}

// ---------------------------------------------------------------------------------------
// Deliberately faulting kernels.

/// Both kernels spin for `cycles` first, so that the host has enqueued the work after
/// them before the fault happens.
const FAULTY_SRC: &str = r#"
__device__ void spin(unsigned long long cycles) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
}

extern "C" __global__ void spin_only(unsigned long long cycles) {
    spin(cycles);
}

extern "C" __global__ void fault_trap(unsigned long long cycles) {
    spin(cycles);
    __trap();
}

extern "C" __global__ void fault_write_to(unsigned long long cycles, unsigned long long address,
                                          unsigned value) {
    spin(cycles);
    if (threadIdx.x == 0 && blockIdx.x == 0) *(volatile unsigned*)address = value;
}
"#;

#[kernel(cuda = FAULTY_SRC)]
/// Spins for about `cycles` clock cycles, and touches no memory.
unsafe fn spin_only(cycles: u64);

#[kernel(cuda = FAULTY_SRC)]
/// Spins for about `cycles` clock cycles, then executes `__trap()`. It touches no
/// memory, so the declaration's promise holds; the kernel faults on purpose.
unsafe fn fault_trap(cycles: u64);

// THE PROMISE IS BROKEN HERE, ON PURPOSE: a `#[kernel]` declaration promises that the
// kernel writes only through its `&mut` slices, and this one writes wherever `address`
// points. It exists to show what the library does when a kernel faults; no code outside
// this test may declare a kernel like it.
#[kernel(cuda = FAULTY_SRC)]
/// Spins for about `cycles` clock cycles, then stores `value` at the device address
/// `address`.
unsafe fn fault_write_to(cycles: u64, address: u64, value: u32);

/// An address no GPU or host mapping covers (the null page, below `mmap_min_addr`).
const UNMAPPED_ADDRESS: u64 = 0x100;

/// About 20 ms of spinning on a current GPU.
const SPIN_CYCLES: u64 = 40_000_000;

// ---------------------------------------------------------------------------------------
// The tests (parent side).

/// `__trap()` in a kernel: the scope returns the trap's driver error, and its message
/// says the context is unusable and to restart; a download enqueued before the kernel
/// is complete, downloads enqueued after it are untouched (pinned and pageable); a
/// second scope, a new stream, `DeviceVec` calls, and opening and using the device
/// again all return errors; dropping everything returns.
fn trapping_kernel_fails_its_scope_and_every_later_call_without_hanging() -> TestResult {
    let run = run_scenario("trap")?;
    check_same_stream_fault(&run, TRAP_ERRORS)
}

/// A store to an unmapped address: as the trap, with `CUDA_ERROR_ILLEGAL_ADDRESS`.
fn illegal_address_write_fails_its_scope_and_every_later_call_without_hanging() -> TestResult {
    let run = run_scenario("illegal_address")?;
    check_same_stream_fault(&run, ILLEGAL_ADDRESS_ERRORS)
}

/// `__trap()` in a forked child on a second stream: the outer scope returns the trap's
/// error (the fork itself may or may not have seen it yet); the parent's download
/// enqueued before the fork is complete, its download after the fork (ordered after the
/// child by the join) is untouched, and later calls fail.
fn trap_in_a_forked_child_fails_the_fork_or_its_parent_scope() -> TestResult {
    let run = run_scenario("fork_trap")?;
    exited_normally(&run)?;
    fault_error(&run, "scope", TRAP_ERRORS)?;
    let fork = run.value("fork")?;
    if fork != "ok" {
        fault_error(&run, "fork", TRAP_ERRORS)?;
    }
    run.expect("before", "complete")?;
    run.expect("after_pinned", "untouched")?;
    for key in [
        "scope_again",
        "upload_vec",
        "device_new",
        "device_new_and_use",
    ] {
        any_error(&run, key)?;
    }
    run.expect("dropped", "ok")
}

/// A panic inside a scope whose kernel has faulted: the scope cannot prove its stream
/// idle while unwinding, so the process aborts (SIGABRT) with the documented message
/// instead of returning from `catch_unwind` with DMA possibly still running.
fn panic_in_a_scope_whose_kernel_faulted_aborts_the_process() -> TestResult {
    let run = run_scenario("panic_after_fault")?;
    run.expect("panicking", "now")?;
    ensure!(
        !run.has("returned"),
        "catch_unwind returned after the faulted scope panicked; it must abort.\n{run}"
    );
    ensure!(
        run.stderr.contains(ABORT_MESSAGE),
        "the child's stderr does not contain {ABORT_MESSAGE:?}.\n{run}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        ensure!(
            run.status.signal() == Some(6),
            "the child ended with {}, expected SIGABRT (signal 6).\n{run}",
            run.status
        );
    }
    #[cfg(not(unix))]
    ensure!(
        !run.status.success(),
        "the child exited successfully; it must abort.\n{run}"
    );
    Ok(())
}

/// `__trap()` in a `run_owned` closure: the future resolves (the completion thread sees
/// the sticky error in its event wait, it does not hang) to the trap's error; a future
/// on another stream, dropped while its kernel ran when the fault hit, has its pinned
/// buffer released by the completion thread (the context stopped: no DMA runs any more),
/// none leaked, nothing left in flight; and a `run_owned` after the fault fails.
fn trap_in_a_run_owned_closure_is_the_futures_error_and_releases_dropped_futures() -> TestResult {
    future_trap_checks("future_trap")
}

/// The same with the head-of-line bypass on both streams: the trapping operation's ring
/// is never called (the context stopped), and the completion thread still resolves it.
fn trap_on_head_of_line_bypass_streams_is_the_futures_error_and_releases_dropped_futures(
) -> TestResult {
    future_trap_checks("future_trap_bypass")
}

/// The same with the device's completion thread polling (`CompletionMode::Poll`): it
/// learns of the fault from an event query, not from a blocking synchronisation.
fn trap_with_the_completion_thread_polling_is_the_futures_error_and_releases_dropped_futures(
) -> TestResult {
    future_trap_checks("future_trap_polling")
}

/// The checks of the `run_owned` trap scenarios.
fn future_trap_checks(scenario: &str) -> TestResult {
    let run = run_scenario(scenario)?;
    exited_normally(&run)?;
    fault_error(&run, "future", TRAP_ERRORS)?;
    run.expect("in_flight", "0")?;
    run.expect("released_after_drop", "1")?;
    run.expect("leaked", "0")?;
    any_error(&run, "future_after")
}

/// The checks shared by the same-stream scenarios.
fn check_same_stream_fault(run: &ChildOutput, names: &[&str]) -> TestResult {
    exited_normally(run)?;
    fault_error(run, "scope", names)?;
    run.expect("before", "complete")?;
    run.expect("after_pinned", "untouched")?;
    run.expect("after_pageable", "untouched")?;
    if run.value("wait_after_pinned")? != "not enqueued" {
        any_error(run, "wait_after_pinned")?;
    }
    for key in [
        "scope_again",
        "scope_on_new_stream",
        "upload_vec",
        "alloc_vec",
        "alloc_pinned",
        "to_host_vec",
        "device_new",
        "device_new_and_use",
    ] {
        any_error(run, key)?;
    }
    run.expect("dropped", "ok")
}

/// Runs this binary as a child for `scenario` (see `gpu_tests::child::run_scenario`).
fn run_scenario(scenario: &str) -> TestResult<ChildOutput> {
    gpu_tests::child::run_scenario(SCENARIO_ENV, scenario, CHILD_LIMIT)
}

// ---------------------------------------------------------------------------------------
// The scenarios (child side).

mod child {
    use super::*;

    /// Elements of the large downloads (64 MiB of `u32`).
    const LEN: usize = 16 << 20;
    /// Elements of the pageable download after the fault (4 MiB of `u32`).
    const PAGEABLE_LEN: usize = 1 << 20;

    /// Runs `scenario`, printing observations; returns the exit code.
    pub(super) fn run(scenario: &str) -> i32 {
        let outcome = match scenario {
            "trap" => same_stream_fault(Fault::Trap),
            "illegal_address" => same_stream_fault(Fault::IllegalAddress),
            "fork_trap" => fork_trap(),
            "panic_after_fault" => panic_after_fault(),
            "future_trap" => future_trap(false, false),
            "future_trap_bypass" => future_trap(true, false),
            "future_trap_polling" => future_trap(false, true),
            other => {
                println!("setup = err unknown scenario {other:?}");
                return 2;
            }
        };
        match outcome {
            Ok(()) => {
                println!("done = ok");
                0
            }
            Err(e) => {
                println!("setup = {}", describe(&Err::<(), _>(e)));
                3
            }
        }
    }

    #[derive(Clone, Copy)]
    enum Fault {
        Trap,
        IllegalAddress,
    }

    /// Launches the faulting kernel of `fault` on `s`'s stream.
    fn launch<'s>(s: &'s Scope<'s, '_>, fault: Fault) -> stream_core::Result<()> {
        let one = LaunchConfig::for_elements(1, 32);
        match fault {
            Fault::Trap => fault_trap(s, one, SPIN_CYCLES),
            Fault::IllegalAddress => fault_write_to(s, one, SPIN_CYCLES, UNMAPPED_ADDRESS, 7),
        }
    }

    /// `complete`, `untouched` (all poison) or `partial: ...` for a download of `input`.
    fn classify(input: &[u32], host: &[u32]) -> String {
        let written = input.iter().zip(host).filter(|(i, h)| i == h).count();
        let untouched = host.iter().filter(|&&h| h == u32::POISON).count();
        if written == input.len() {
            "complete".to_owned()
        } else if untouched == host.len() {
            "untouched".to_owned()
        } else {
            format!(
                "partial: {written} of {} elements written, {untouched} untouched, {} other",
                host.len(),
                host.len() - written - untouched
            )
        }
    }

    /// A small round trip on `stream`; `Err` also when the data came back wrong.
    fn round_trip(stream: &Stream) -> stream_core::Result<()> {
        let input: Vec<u32> = Rng::new().vec(4096);
        let mut out = poisoned::<u32>(input.len());
        scope(stream, |s| {
            let x = s.upload(&input)?;
            s.copy_to_host(&x, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })?;
        if out != input {
            println!("corrupt = a round trip returned Ok with wrong data");
        }
        Ok(())
    }

    /// Calls that must fail after a fault, then drops everything.
    fn later_calls(dev: Device, stream: Stream, kept: stream_core::DeviceVec<u32>) {
        report("scope_again", &round_trip(&stream));
        report(
            "scope_on_new_stream",
            &dev.new_stream().and_then(|other| round_trip(&other)),
        );
        report("upload_vec", &dev.upload_vec(&[1u32; 16]).map(drop));
        report("alloc_vec", &dev.alloc_vec::<u32>(16).map(drop));
        report("to_host_vec", &kept.to_host_vec().map(drop));
        report("alloc_pinned", &dev.alloc_pinned::<u32>(16).map(drop));
        report("device_new", &Device::new(0).map(drop));
        report(
            "device_new_and_use",
            &Device::new(0).and_then(|d| round_trip(&d.new_stream()?)),
        );
        report("memory_info", &dev.memory_info());
        drop(kept);
        drop(stream);
        drop(dev);
        println!("dropped = ok");
    }

    /// Upload; download (before); fault; downloads (after, pinned and pageable); all on
    /// one stream.
    fn same_stream_fault(fault: Fault) -> stream_core::Result<()> {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let mut before = dev.alloc_pinned::<u32>(LEN)?;
        let mut after = dev.alloc_pinned::<u32>(LEN)?;
        let mut after_pageable = poisoned::<u32>(PAGEABLE_LEN);
        poison(&mut before);
        poison(&mut after);
        let kept = dev.upload_vec(&input[..4096])?;
        let outcome = scope(&stream, |s| {
            let x = s.upload(&input)?;
            let _before = s.copy_to_host(&x, &mut before)?;
            report("launch", &launch(s, fault));
            let after_pinned = s.copy_to_host(&x, &mut after);
            report("enqueue_after_pinned", &after_pinned);
            let pageable = s.copy_to_host(&x.slice(..PAGEABLE_LEN)?, &mut after_pageable);
            report("enqueue_after_pageable", &pageable);
            match after_pinned {
                Ok(pending) => report("wait_after_pinned", &pending.wait()),
                Err(_) => println!("wait_after_pinned = not enqueued"),
            }
            Ok::<_, Error>(())
        });
        report("scope", &outcome);
        println!("before = {}", classify(&input, &before));
        println!("after_pinned = {}", classify(&input, &after));
        println!(
            "after_pageable = {}",
            classify(&input[..PAGEABLE_LEN], &after_pageable)
        );
        drop((before, after));
        later_calls(dev, stream, kept);
        Ok(())
    }

    /// The trap in a forked child on a second stream.
    fn fork_trap() -> stream_core::Result<()> {
        let dev = Device::new(0)?;
        let (a, b) = (dev.new_stream()?, dev.new_stream()?);
        let input: Vec<u32> = Rng::new().vec(LEN);
        let mut before = dev.alloc_pinned::<u32>(LEN)?;
        let mut after = dev.alloc_pinned::<u32>(LEN)?;
        poison(&mut before);
        poison(&mut after);
        let kept = dev.upload_vec(&input[..4096])?;
        let outcome = scope(&a, |s| {
            let x = s.upload(&input)?;
            let _before = s.copy_to_host(&x, &mut before)?;
            let forked = s.fork(&b, &x, |c, _x| {
                report("launch", &launch(c, Fault::Trap));
                Ok::<_, Error>(())
            });
            report("fork", &forked);
            let _after = s.copy_to_host(&x, &mut after);
            Ok::<_, Error>(())
        });
        report("scope", &outcome);
        println!("before = {}", classify(&input, &before));
        println!("after_pinned = {}", classify(&input, &after));
        drop((before, after, b));
        later_calls(dev, a, kept);
        Ok(())
    }

    /// A trap in a `run_owned` closure, awaited with `block_on`, while a dropped future's
    /// kernel runs on a second stream. With `bypass`, both streams have the head-of-line
    /// bypass on, so the trapping operation rings (the driver then never calls its host
    /// function). With `polling`, the device's completion thread polls.
    fn future_trap(bypass: bool, polling: bool) -> stream_core::Result<()> {
        use stream_core::future::{completion_stats, set_completion_mode, CompletionMode};
        let dev = Device::new(0)?;
        if polling {
            set_completion_mode(&dev, CompletionMode::Poll)?;
        }
        let (a, b) = (dev.new_stream()?, dev.new_stream()?);
        a.set_head_of_line_bypass(bypass);
        b.set_head_of_line_bypass(bypass);
        let before = completion_stats();
        // Spins about four times as long as the trapping kernel: still running at the
        // fault, so its payload is parked on the completion thread when the fault hits.
        let dropped = b.run_owned(dev.alloc_pinned::<u32>(4096)?, |s, _| {
            spin_only(s, LaunchConfig::for_elements(1, 32), SPIN_CYCLES * 4)
        });
        drop(dropped);
        let faulted =
            mini_executor::block_on(a.run_owned(dev.alloc_pinned::<u32>(4096)?, |s, _| {
                launch(s, Fault::Trap)
            }));
        report("future", &faulted.map(drop));
        let start = std::time::Instant::now();
        while completion_stats().in_flight > before.in_flight
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let after = completion_stats();
        println!("in_flight = {}", after.in_flight - before.in_flight);
        println!(
            "released_after_drop = {}",
            after.released_after_drop - before.released_after_drop
        );
        println!("leaked = {}", after.leaked - before.leaked);
        let again = mini_executor::block_on(a.run_owned((), |_, ()| Ok::<_, Error>(())));
        report("future_after", &again.map(drop));
        drop((a, b));
        drop(dev);
        println!("dropped = ok");
        Ok(())
    }

    /// A panic in a scope after a trapping launch: `scope` must abort while unwinding.
    fn panic_after_fault() -> stream_core::Result<()> {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(&stream, |s| -> stream_core::Result<()> {
                report("launch", &launch(s, Fault::Trap));
                println!("panicking = now");
                panic!("deliberate panic after a kernel fault (expected by this test)");
            })
        }));
        // Not reached: the scope aborts the process while unwinding.
        println!("returned = {}", caught.is_ok());
        Ok(())
    }
}
