//! Kernel faults in the modules added after `test_faults` was written: a kernel that
//! traps inside a graph's replay, between a managed prefetch to the device and the
//! prefetch back, inside a fork that holds memory converted from a cudarc slice, and
//! behind an NCCL collective (whose scope ends by polling the stream, not by a
//! synchronisation: the poll must see the fault and the scope report it).
//! (A trap behind pending owned-buffer futures is `test_faults`'s.) Each ends in an
//! `Err` for the user, never a hang; the host memory the faulted work would have
//! written after the fault is untouched; every later call fails; and the process can
//! open the device again but not use it (the driver keeps the primary context unusable
//! until the process restarts).
//!
//! As in `test_faults`, every scenario runs in a child process (this binary with
//! `STREAM_CORE_FAULT_SCENARIO=<scenario>`), which prints `key = value` lines that the
//! parent checks; a child that runs past [`CHILD_LIMIT`] is killed and its test fails.
//! compute-sanitizer would report these faults (they are the point), so
//! `scripts/sanitize.sh` skips this binary.

use std::time::Duration;

use gpu_tests::child::{any_error, exited_normally, fault_error, report, ChildOutput};
use gpu_tests::{poison, tests, Element, Rng, Test, TestResult};
use stream_core::nccl::{Communicator, Sum};
use stream_core::{kernel, scope, Device, DeviceVec, Error, LaunchConfig};

/// The environment variable that makes this binary run one fault scenario as a child.
const SCENARIO_ENV: &str = "STREAM_CORE_FAULT_SCENARIO";

/// How long a child may run before it counts as hung.
const CHILD_LIMIT: Duration = Duration::from_secs(90);

/// What `__trap()` is reported as (see `test_faults`).
const TRAP_ERRORS: &[&str] = &["CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION"];

/// Elements of the buffers (4 MiB of `u32`).
const LEN: usize = 1 << 20;

/// About 20 ms of spinning before the trap, so the host has enqueued what follows it.
const SPIN_CYCLES: u64 = 40_000_000;

const TRAP_SRC: &str = r#"
extern "C" __global__ void trap_after(unsigned long long cycles) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    __trap();
}
"#;

#[kernel(cuda = TRAP_SRC)]
/// Spins for about `cycles` clock cycles, then executes `__trap()`. It touches no
/// memory, so the declaration's promise holds; the kernel faults on purpose.
unsafe fn trap_after(cycles: u64);

fn main() {
    if let Ok(scenario) = std::env::var(SCENARIO_ENV) {
        std::process::exit(child::run(&scenario));
    }
    let gpu: Vec<Test> = tests![
        a_trap_in_a_graph_replay_is_the_replays_error_and_its_later_copy_never_runs,
        a_trap_between_managed_prefetches_is_the_prefetch_waits_error,
        a_trap_in_a_fork_holding_memory_from_cudarc_fails_the_scope_and_the_conversion_back,
        a_trap_behind_a_collective_fails_the_wait_and_the_scope_and_later_copies_never_run,
    ];
    gpu_tests::run(&gpu, &[])
}

// ---------------------------------------------------------------------------------------
// The tests (parent side).

/// A graph of an upload, a trapping kernel and a download of the upload, replayed: the
/// replay's `wait` returns the trap's error, the pinned buffer the download would have
/// written is untouched, replaying again and using a device opened again fail.
fn a_trap_in_a_graph_replay_is_the_replays_error_and_its_later_copy_never_runs() -> TestResult {
    let run = run_scenario("graph_trap")?;
    exited_normally(&run)?;
    fault_error(&run, "replay_wait", TRAP_ERRORS)?;
    any_error(&run, "scope")?;
    run.expect("held_after", "untouched")?;
    later_calls_fail(&run)
}

/// A managed vec prefetched to the device, a trap, the prefetch back: its `wait` returns
/// the trap's error and the scope fails; the host's read of the vec afterwards returns
/// (a value or an error: the child reports which) instead of crashing the process.
fn a_trap_between_managed_prefetches_is_the_prefetch_waits_error() -> TestResult {
    let run = run_scenario("managed_trap")?;
    exited_normally(&run)?;
    fault_error(&run, "prefetch_wait", TRAP_ERRORS)?;
    any_error(&run, "scope")?;
    run.value("host_read")?;
    later_calls_fail(&run)
}

/// Memory converted from a cudarc slice, attached and lent to a fork whose kernel traps:
/// the scope returns the trap's error (the fork may already have), and converting the
/// memory back to cudarc afterwards fails instead of handing out a slice.
fn a_trap_in_a_fork_holding_memory_from_cudarc_fails_the_scope_and_the_conversion_back(
) -> TestResult {
    let run = run_scenario("cudarc_fork_trap")?;
    exited_normally(&run)?;
    fault_error(&run, "scope", TRAP_ERRORS)?;
    if run.value("fork")? != "ok" {
        fault_error(&run, "fork", TRAP_ERRORS)?;
    }
    any_error(&run, "into_cudarc")?;
    later_calls_fail(&run)
}

/// A one-rank all_reduce, a trap, then two downloads (one waited for, one not): the
/// wait and the scope (which end by polling, as behind any collective) return the
/// trap's error, neither buffer is written, and dropping the communicator returns.
fn a_trap_behind_a_collective_fails_the_wait_and_the_scope_and_later_copies_never_run() -> TestResult
{
    let run = run_scenario("collective_trap")?;
    exited_normally(&run)?;
    fault_error(&run, "download_wait", TRAP_ERRORS)?;
    fault_error(&run, "scope", TRAP_ERRORS)?;
    run.expect("waited_after", "untouched")?;
    run.expect("unwaited_after", "untouched")?;
    run.expect("communicator_dropped", "ok")?;
    later_calls_fail(&run)
}

/// The checks every scenario ends with: a new scope fails, opening the device again
/// (reported, either way) and using it fails, and dropping everything returns.
fn later_calls_fail(run: &ChildOutput) -> TestResult {
    run.value("device_new")?;
    any_error(run, "scope_again")?;
    any_error(run, "device_new_and_use")?;
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

    /// A scenario's outcome: `Err` only when it could not be set up (the observations
    /// themselves are printed, whatever they are).
    type Setup = Result<(), Box<dyn std::error::Error>>;

    /// Runs `scenario`, printing observations; returns the exit code.
    pub(super) fn run(scenario: &str) -> i32 {
        let outcome = match scenario {
            "graph_trap" => graph_trap(),
            "managed_trap" => managed_trap(),
            "cudarc_fork_trap" => cudarc_fork_trap(),
            "collective_trap" => collective_trap(),
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
            Err(why) => {
                println!("setup = err {why}");
                3
            }
        }
    }

    fn one() -> LaunchConfig {
        LaunchConfig::for_elements(1, 32)
    }

    /// `untouched` when every element of `host` is still poison, else how many changed.
    fn classify(host: &[u32]) -> String {
        let changed = host.iter().filter(|&&h| h != u32::POISON).count();
        match changed {
            0 => "untouched".to_owned(),
            n => format!("{n} of {} elements written", host.len()),
        }
    }

    /// Reports the calls that must fail after a fault on `dev`.
    fn later_calls(dev: &Device) {
        let round_trip = |d: &Device| -> stream_core::Result<()> {
            let stream = d.new_stream()?;
            let mut out = vec![0u32; 16];
            scope(&stream, |s| {
                let x = s.upload(&[7u32; 16])?;
                s.copy_to_host(&x, &mut out)?.wait().map(drop)
            })
        };
        report("scope_again", &round_trip(dev));
        report("device_new", &Device::new(0).map(drop));
        report(
            "device_new_and_use",
            &Device::new(0).and_then(|d| round_trip(&d)),
        );
    }

    /// Upload, trap, download of the upload, captured; replayed once.
    fn graph_trap() -> Setup {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let held = (dev.alloc_pinned::<u32>(LEN)?, dev.alloc_pinned::<u32>(LEN)?);
        let (mut graph, ()) = dev.capture(held, |g, (x, mut y)| {
            let dx = g.upload(&x)?;
            trap_after(g, one(), SPIN_CYCLES)?;
            g.copy_to_host(&dx, &mut y)?;
            Ok::<_, Error>(())
        })?;
        {
            let (x, y) = graph.held_mut();
            x.copy_from_slice(&input);
            poison(y);
        }
        let replayed = scope(&stream, |s| {
            let pending = s.replay(&mut graph)?;
            report("replay_wait", &pending.wait().map(drop));
            Ok::<_, Error>(())
        });
        report("scope", &replayed);
        println!("held_after = {}", classify(graph.held().1));
        later_calls(&dev);
        drop(graph);
        drop(stream);
        drop(dev);
        println!("dropped = ok");
        Ok(())
    }

    /// A managed vec written by the host, prefetched to the device, a trap, and the
    /// prefetch back with its wait.
    fn managed_trap() -> Setup {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let mut data = dev.alloc_managed::<u32>(LEN)?;
        data.host_mut()?.copy_from_slice(&input);
        let out = scope(&stream, |s| {
            let view = s.attach_managed(&mut data)?;
            s.prefetch_to_device(&view)?;
            trap_after(s, one(), SPIN_CYCLES)?;
            let back = s.prefetch_to_host(view).and_then(|p| p.wait().map(drop));
            report("prefetch_wait", &back);
            Ok::<_, Error>(())
        });
        report("scope", &out);
        report("host_read", &data.host().map(|h| h[0]));
        later_calls(&dev);
        drop(data);
        drop(stream);
        drop(dev);
        println!("dropped = ok");
        Ok(())
    }

    /// A slice uploaded by cudarc, converted to a `DeviceVec`, attached and lent to a
    /// fork whose kernel traps before it fills the memory; then converted back.
    fn cudarc_fork_trap() -> Setup {
        let dev = Device::new(0)?;
        let context = dev.cudarc_context()?;
        let theirs = context.new_stream()?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let slice = theirs.clone_htod(&input)?;
        let mut vec = DeviceVec::from_cudarc(slice)?;
        let (a, b) = (dev.new_stream()?, dev.new_stream()?);
        let out = scope(&a, |s| {
            let mut x = s.attach(&mut vec)?;
            let forked = s.fork(&b, &mut x, |c, mut x| {
                trap_after(c, one(), SPIN_CYCLES)?;
                c.fill(&mut x, 0)
            });
            report("fork", &forked);
            Ok::<_, Error>(())
        });
        report("scope", &out);
        report("into_cudarc", &vec.into_cudarc(&theirs).map(drop));
        later_calls(&dev);
        drop((a, b, theirs, context));
        drop(dev);
        println!("dropped = ok");
        Ok(())
    }

    /// A one-rank all_reduce of an upload, a trap, an unwaited download and a waited
    /// one, all into poisoned pinned buffers.
    fn collective_trap() -> Setup {
        let dev = Device::new(0)?;
        let stream = dev.new_stream()?;
        let comm = Communicator::for_devices(std::slice::from_ref(&dev))?
            .pop()
            .ok_or("no communicator for one device")?;
        let input: Vec<u32> = Rng::new().vec(LEN);
        let mut waited = dev.alloc_pinned::<u32>(LEN)?;
        let mut unwaited = dev.alloc_pinned::<u32>(LEN)?;
        poison(&mut waited);
        poison(&mut unwaited);
        let out = scope(&stream, |s| {
            let mut x = s.upload(&input)?;
            s.all_reduce_in_place(&comm, &mut x, Sum)?;
            trap_after(s, one(), SPIN_CYCLES)?;
            let _unwaited = s.copy_to_host(&x, &mut unwaited[..])?;
            let wait = s
                .copy_to_host(&x, &mut waited[..])
                .and_then(|pending| pending.wait().map(drop));
            report("download_wait", &wait);
            Ok::<_, Error>(())
        });
        report("scope", &out);
        println!("waited_after = {}", classify(&waited));
        println!("unwaited_after = {}", classify(&unwaited));
        drop(comm);
        println!("communicator_dropped = ok");
        later_calls(&dev);
        drop((waited, unwaited, stream));
        drop(dev);
        println!("dropped = ok");
        Ok(())
    }
}
