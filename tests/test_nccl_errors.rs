//! Bad input and failure around NCCL (rows "NCCL" of the bad-input table,
//! `stream-core/src/errors_doc.md`): lengths and ranks that do not fit, group misuse, an
//! aborted communicator, no NCCL library, and, with two GPUs, another device's
//! communicator, a rank killed mid-collective and a run under `torchrun`. A collective
//! that never completes is `test_nccl_hung`'s.
//!
//! Two-GPU tests and the `torchrun` test are registered only where they can run;
//! stderr says which were left out and why. Scenarios that abort a communicator on
//! purpose run in a child process of this binary ([`CHILD_ENV`]).

use std::process::Command;
use std::time::Duration;

use gpu_tests::child::run_command;
use gpu_tests::nccl_ranks::{exclusive, on_ranks, rank_count, variant_or_ok};
use gpu_tests::rank_processes::{free_port, lone_rank_of_two, two_ranks};
use gpu_tests::tests;
use gpu_tests::{ensure, gpu_status, poisoned, GpuStatus, Test, TestFn, TestResult};
use stream_core::nccl::{self, Communicator, Sum, UniqueId, World};
use stream_core::{scope, Device, Error};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_NCCL_ERRORS_CHILD";

fn main() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&mode));
    }
    let mut gpu: Vec<Test> = tests![
        lengths_that_disagree_are_refused_and_the_scope_goes_on,
        ranks_outside_the_communicator_are_invalid_rank,
        group_misuse_is_refused_before_anything_is_enqueued,
        an_aborted_communicator_refuses_every_later_call,
        an_abort_inside_a_group_is_made_after_its_end,
        a_send_without_its_receive_is_an_nccl_error_at_the_group_end,
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => gpu.extend(tests![
            a_communicator_of_another_device_is_device_mismatch,
            a_rank_killed_mid_collective_ends_in_an_err_not_a_hang,
            ranks_given_one_gpu_each_by_cuda_visible_devices_use_it,
            ranks_that_leave_right_after_joining_exit_cleanly,
        ]),
        GpuStatus::Present(n) => eprintln!(
            "test_nccl_errors: {n} CUDA device(s): the two-GPU tests \
             a_communicator_of_another_device_is_device_mismatch, \
             a_rank_killed_mid_collective_ends_in_an_err_not_a_hang and \
             ranks_given_one_gpu_each_by_cuda_visible_devices_use_it are not registered \
             (NCCL refuses two ranks on one GPU)"
        ),
        GpuStatus::Absent(_) => {}
    }
    if gpu_status().is_present() {
        match torchrun() {
            Some(_) => gpu.extend(tests![under_torchrun_every_rank_joins_and_reduces]),
            None => eprintln!(
                "test_nccl_errors: no `torchrun` on PATH: under_torchrun_every_rank_joins_and_reduces \
                 is not registered (install PyTorch to cover it)"
            ),
        }
    }
    gpu_tests::run(
        &gpu,
        &[(
            "without_nccl_making_a_communicator_is_nccl_not_found",
            without_nccl_making_a_communicator_is_nccl_not_found as TestFn,
        )],
    )
}

/// `torchrun`'s path, if it is on `PATH`.
fn torchrun() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("torchrun"))
            .find(|p| p.is_file())
    })
}

fn lengths_that_disagree_are_refused_and_the_scope_goes_on() -> TestResult {
    on_ranks(rank_count()?, |_rank, comm, stream| {
        let n = comm.size();
        scope(stream, |s| {
            let a = s.alloc_zeroed::<f32>(4)?;
            let mut b = s.alloc_zeroed::<f32>(5)?;
            let err = s.all_reduce(comm, &a, &mut b, Sum).unwrap_err();
            ensure!(
                matches!(&err, Error::LengthMismatch(d) if d.what == "all_reduce"),
                "all_reduce 4 -> 5: {err}"
            );
            let err = s.broadcast(comm, &a, &mut b, 0).unwrap_err();
            ensure!(
                matches!(&err, Error::LengthMismatch(d) if d.what == "broadcast"),
                "broadcast: {err}"
            );
            let mut wide = s.alloc_zeroed::<f32>(4 * n + 1)?;
            let err = s.all_gather(comm, &a, &mut wide).unwrap_err();
            ensure!(
                matches!(&err, Error::ShapeMismatch(d) if d.expected == 4 * n && d.actual == 4 * n + 1),
                "all_gather: {err}"
            );
            let mut four = s.alloc_zeroed::<f32>(4)?;
            let err = s.reduce_scatter(comm, &wide, &mut four, Sum).unwrap_err();
            ensure!(
                matches!(&err, Error::ShapeMismatch(d) if d.expected == 4 * n && d.actual == 4 * n + 1),
                "reduce_scatter: {err}"
            );
            if n > 1 {
                let err = s.all_gather_in_place(comm, &mut wide).unwrap_err();
                ensure!(
                    matches!(err, Error::ShapeMismatch(_)),
                    "all_gather_in_place of {}: {err}",
                    4 * n + 1
                );
            }
            // The same scope and communicator still work.
            let mut c = s.alloc_zeroed::<f32>(4)?;
            s.all_reduce(comm, &a, &mut c, Sum)?;
            Ok::<_, gpu_tests::Failed>(())
        })
    })
}

fn ranks_outside_the_communicator_are_invalid_rank() -> TestResult {
    on_ranks(rank_count()?, |_rank, comm, stream| {
        let n = comm.size();
        scope(stream, |s| {
            let a = s.alloc_zeroed::<u8>(8)?;
            let mut b = s.alloc_zeroed::<u8>(8)?;
            let invalid = |e: &Error, rank: usize| matches!(e, Error::InvalidRank { rank: r, size } if *r == rank && *size == n);
            let err = s.broadcast(comm, &a, &mut b, n).unwrap_err();
            ensure!(invalid(&err, n), "broadcast root {n}: {err}");
            let err = s.reduce(comm, &a, &mut b, Sum, usize::MAX).unwrap_err();
            ensure!(
                matches!(
                    err,
                    Error::InvalidRank {
                        rank: usize::MAX,
                        ..
                    }
                ),
                "reduce root MAX: {err}"
            );
            let err = s.send(comm, &a, n + 3).unwrap_err();
            ensure!(invalid(&err, n + 3), "send to {}: {err}", n + 3);
            let err = s.recv(comm, &mut b, n).unwrap_err();
            ensure!(invalid(&err, n), "recv from {n}: {err}");
            Ok::<_, gpu_tests::Failed>(())
        })?;
        let id = UniqueId::new()?;
        let err = Communicator::join(comm.device(), &id, 2, 2).unwrap_err();
        ensure!(
            matches!(err, Error::InvalidRank { rank: 2, size: 2 }),
            "join as rank 2 of 2: {err}"
        );
        let err = Communicator::for_devices(&[]).unwrap_err();
        ensure!(
            matches!(err, Error::InvalidRank { rank: 0, size: 0 }),
            "for_devices(&[]): {err}"
        );
        Ok(())
    })
}

fn group_misuse_is_refused_before_anything_is_enqueued() -> TestResult {
    on_ranks(rank_count()?, |rank, comm, stream| {
        scope(stream, |s| {
            let a = s.upload(&[1.0f32; 16])?;
            let mut b = s.alloc_zeroed::<f32>(16)?;
            let inner = nccl::group(|_outer| nccl::group(|_inner| Ok::<_, Error>(()))).unwrap_err();
            ensure!(
                matches!(inner, Error::NcclGroup { .. }),
                "a group inside a group: {inner}"
            );
            let err = nccl::group(|_g| s.all_reduce(comm, &a, &mut b, Sum)).unwrap_err();
            ensure!(
                matches!(err, Error::NcclGroup { reason } if reason.contains("call it on the group")),
                "a scope's collective inside a group: {err}"
            );
            let err = s.send(comm, &a, rank).unwrap_err();
            ensure!(
                matches!(err, Error::NcclGroup { .. }),
                "an ungrouped send to itself: {err}"
            );
            let device = comm.device();
            let lone = lone_rank_of_two()?;
            let made_inside = nccl::group(|_g| {
                let id = UniqueId::new()?;
                Ok::<_, Error>([
                    Communicator::join(device, &id, 0, 1).map(drop),
                    Communicator::join_within(device, &id, 0, 1, Duration::from_secs(5)).map(drop),
                    Communicator::for_devices(std::slice::from_ref(device)).map(drop),
                    // Rank 1 of 2 meeting at a port nobody serves: refused before the wait.
                    lone.communicator(device).map(drop),
                ])
            })?;
            for made in made_inside {
                ensure!(
                    matches!(&made, Err(Error::NcclGroup { reason }) if reason.contains("made inside")),
                    "a communicator made inside a group: {made:?}"
                );
            }
            // Nothing was left open: grouped and ungrouped calls work afterwards.
            nccl::group(|g| g.all_reduce(s, comm, &a, &mut b, Sum))?;
            s.all_reduce_in_place(comm, &mut b, Sum)?;
            Ok::<_, gpu_tests::Failed>(())
        })
    })
}

fn an_aborted_communicator_refuses_every_later_call() -> TestResult {
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    comm.check()?;
    comm.abort();
    comm.abort(); // twice is nothing more
    ensure!(comm.is_aborted(), "is_aborted after abort");
    ensure!(
        matches!(comm.check(), Err(Error::CommunicatorAborted { .. })),
        "check after abort"
    );
    let stream = device.new_stream()?;
    scope(&stream, |s| {
        let mut x = s.alloc_zeroed::<i32>(4)?;
        let err = s.all_reduce_in_place(&comm, &mut x, Sum).unwrap_err();
        ensure!(
            matches!(err, Error::CommunicatorAborted { .. }),
            "all_reduce after abort: {err}"
        );
        Ok::<_, gpu_tests::Failed>(())
    })
}

/// NCCL runs an abort called inside a group at the group's end, where it frees the
/// communicator before launching the calls the group holds for it: communicators aborted
/// inside a group, one the group issued a call on and one it issued nothing on, count as
/// aborted at once (their next calls in the group are refused), and NCCL's aborts are
/// made after the group's end. The scope ends (`Ok`, or `CommunicatorAborted` if its end
/// saw the abort), and a new communicator all-reduces.
fn an_abort_inside_a_group_is_made_after_its_end() -> TestResult {
    let device = Device::new(0)?;
    let one_rank = || Communicator::join(&device, &UniqueId::new()?, 0, 1);
    let (held, idle) = (one_rank()?, one_rank()?);
    let stream = device.new_stream()?;
    let mut after_abort = (Ok(()), Ok(()));
    let ended = scope(&stream, |s| {
        let mut x = s.upload(&[1.0f32; 1024])?;
        let (mut y, mut z) = (s.upload(&[1.0f32; 1024])?, s.upload(&[1.0f32; 1024])?);
        nccl::group(|g| {
            g.all_reduce_in_place(s, &held, &mut x, Sum)?;
            held.abort();
            idle.abort();
            after_abort = (
                g.all_reduce_in_place(s, &held, &mut y, Sum),
                g.all_reduce_in_place(s, &idle, &mut z, Sum),
            );
            Ok(())
        })
    });
    ensure!(
        held.is_aborted() && idle.is_aborted(),
        "is_aborted after the group"
    );
    for (which, result) in [("held", &after_abort.0), ("idle", &after_abort.1)] {
        ensure!(
            matches!(result, Err(Error::CommunicatorAborted { .. })),
            "the {which} communicator's call after its abort in the group: {result:?}"
        );
    }
    ensure!(
        matches!(ended, Ok(()) | Err(Error::CommunicatorAborted { .. })),
        "the scope's end: {ended:?}"
    );
    let fresh = one_rank()?;
    let mut summed = [0.0f32; 1024];
    scope(&stream, |s| {
        let mut x = s.upload(&[2.0f32; 1024])?;
        s.all_reduce_in_place(&fresh, &mut x, Sum)?;
        s.copy_to_host(&x, &mut summed[..])?.wait().map(drop)
    })?;
    ensure!(
        summed.iter().all(|&v| v == 2.0),
        "a new communicator's all_reduce: {:?}",
        &summed[..4]
    );
    Ok(())
}

/// A send to this rank itself whose receive is not in the group: NCCL refuses it at the
/// group's end, which is an `Err` of the group (nothing hangs), and the scope and the
/// communicator go on.
fn a_send_without_its_receive_is_an_nccl_error_at_the_group_end() -> TestResult {
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    scope(&stream, |s| {
        let mut x = s.upload(&[7u32; 1024])?;
        let err = nccl::group(|g| g.send(s, &comm, &x, 0)).unwrap_err();
        ensure!(matches!(&err, Error::Nccl(_)), "an unmatched send: {err}");
        eprintln!("an unmatched send to itself: {err}");
        s.all_reduce_in_place(&comm, &mut x, Sum)?;
        Ok::<_, gpu_tests::Failed>(())
    })?;
    ensure!(!comm.is_aborted(), "the communicator was aborted");
    Ok(())
}

fn a_communicator_of_another_device_is_device_mismatch() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let comm = Communicator::join(&d0, &UniqueId::new()?, 0, 1)?;
    let stream = d1.new_stream()?;
    scope(&stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(4)?;
        let err = s.all_reduce_in_place(&comm, &mut x, Sum).unwrap_err();
        ensure!(
            matches!(
                err,
                Error::DeviceMismatch {
                    memory: 0,
                    stream: 1
                }
            ),
            "{err}"
        );
        Ok::<_, gpu_tests::Failed>(())
    })
}

/// Two processes join (through `World`, which makes its members within the rendezvous
/// timeout: `join_within`, whose parent communicator is aborted on a thread of its own
/// for up to a second) and leave at once, three times each way: dropping the member,
/// and exiting with it alive (`std::process::exit`, no destructor runs). Both must exit
/// with 0: a process that ended while that abort ran was killed by SIGSEGV.
fn ranks_that_leave_right_after_joining_exit_cleanly() -> TestResult {
    let _one_at_a_time = exclusive();
    for round in 0..3 {
        for mode in ["join_then_drop", "join_then_exit"] {
            let ranks = two_ranks(CHILD_ENV, mode, |_| Vec::new())?;
            for (r, out) in ranks.iter().enumerate() {
                ensure!(
                    out.status.success(),
                    "{mode}, round {round}: rank {r} failed.\n{out}"
                );
                out.expect("joined", "true")?;
            }
        }
    }
    Ok(())
}

/// Two processes, ranks 0 and 1 on GPUs 0 and 1; rank 1 dies after the first
/// all_reduce, while its second is queued. Rank 0's scope must end with an `Err`
/// within the communicator's timeout (10 s here), not hang.
fn a_rank_killed_mid_collective_ends_in_an_err_not_a_hang() -> TestResult {
    let _one_at_a_time = exclusive();
    let [zero, one] = two_ranks(CHILD_ENV, "killed_rank", |_| {
        vec![("STREAM_CORE_NCCL_TIMEOUT_S", Some("10"))]
    })?;
    ensure!(!one.status.success(), "rank 1 was meant to die.\n{one}");
    zero.expect("first", "ok")?;
    let second = zero.value("second")?;
    ensure!(
        second == "CollectiveTimedOut" || second == "Nccl",
        "rank 0's scope after its peer died: {second}.\n{zero}"
    );
    Ok(())
}

/// Two ranks started by hand, each with `CUDA_VISIBLE_DEVICES` naming its own GPU (as
/// `srun --gpus-per-task=1` and per-rank `mpirun` wrappers do): rank 1's local rank is
/// 1, yet it sees one GPU, ordinal 0, which `World::device` gives it; both join and
/// reduce (NCCL would refuse two ranks on one GPU, so success shows they are distinct).
fn ranks_given_one_gpu_each_by_cuda_visible_devices_use_it() -> TestResult {
    let _one_at_a_time = exclusive();
    let [zero, one] = two_ranks(CHILD_ENV, "join_and_reduce", |r| {
        vec![("CUDA_VISIBLE_DEVICES", Some(r))]
    })?;
    for (r, out) in [(0, &zero), (1, &one)] {
        ensure!(out.status.success(), "rank {r} failed.\n{out}");
        out.expect(&format!("ordinal{r}"), "0")?;
        out.expect(&format!("sum{r}"), "3")?;
        out.expect(&format!("exchange{r}"), "ok")?;
        out.expect("launcher", "Environment")?;
    }
    Ok(())
}

/// `torchrun --no-python --nproc-per-node=N` over this binary, N = every GPU (at most
/// 2): each rank builds its `World` from torchrun's variables, joins, all-reduces its
/// rank + 1, prints the sum, and exchanges blocks of uneven lengths with every rank
/// (`all_to_all_v` between processes).
fn under_torchrun_every_rank_joins_and_reduces() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let exe = std::env::current_exe()?;
    let mut command = Command::new(torchrun().ok_or("torchrun vanished")?);
    command
        .arg("--no-python")
        .arg(format!("--nproc-per-node={ranks}"))
        .arg(format!("--master-port={}", free_port()?))
        .arg(exe);
    let out = run_command(
        "torchrun",
        command,
        &[(CHILD_ENV, Some("join_and_reduce"))],
        Duration::from_secs(180),
    )?;
    ensure!(out.status.success(), "torchrun failed.\n{out}");
    let expected = (1..=ranks).sum::<usize>().to_string();
    let sums: Vec<&str> = out
        .lines
        .iter()
        .filter(|(k, _)| k.starts_with("sum"))
        .map(|(_, v)| v.as_str())
        .collect();
    ensure!(
        sums.len() == ranks && sums.iter().all(|v| *v == expected),
        "sums {sums:?}, expected {ranks} × {expected}.\n{out}"
    );
    for rank in 0..ranks {
        out.expect(&format!("exchange{rank}"), "ok")?;
    }
    ensure!(out.has("launcher"), "no launcher line.\n{out}");
    out.expect("launcher", "Torchrun")
}

/// Runs everywhere: without NCCL (this project's CI machines) making an id is
/// `NcclNotFound` with the library's name, never a panic; with it, the version is read.
fn without_nccl_making_a_communicator_is_nccl_not_found() -> TestResult {
    if nccl::is_available() {
        let (major, minor, _) = nccl::version()?;
        ensure!(major >= 2 && minor > 0, "NCCL version {major}.{minor}");
        return Ok(());
    }
    let err = UniqueId::new().unwrap_err();
    ensure!(matches!(err, Error::NcclNotFound), "{err}");
    ensure!(err.to_string().contains("libnccl.so.2"), "{err}");
    ensure!(
        matches!(nccl::version(), Err(Error::NcclNotFound)),
        "version without NCCL"
    );
    Ok(())
}

/// Child modes: print `key = value` lines; exit code 0 unless a step failed.
fn child(mode: &str) -> i32 {
    let result = match mode {
        "killed_rank" => killed_rank_child(),
        "join_and_reduce" => join_and_reduce_child(),
        "join_then_drop" => join_then_leave_child(Leave::Drop),
        "join_then_exit" => join_then_leave_child(Leave::Exit),
        other => Err(format!("unknown child mode {other}").into()),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            println!("failed = {}", e.message().unwrap_or("?"));
            1
        }
    }
}

fn killed_rank_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    let stream = device.new_stream()?;
    let ones = vec![1.0f32; 1 << 20];
    scope(&stream, |s| {
        let mut x = s.upload(&ones)?;
        s.all_reduce_in_place(&comm, &mut x, Sum)
    })?;
    println!("first = ok");
    if world.rank() == 1 {
        // Die with the next collective queued on the GPU and its peer waiting in it.
        scope(&stream, |s| {
            let mut x = s.upload(&ones)?;
            s.all_reduce_in_place(&comm, &mut x, Sum)?;
            std::process::abort();
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        })?;
    }
    std::thread::sleep(Duration::from_millis(500)); // rank 1 is gone by now
    let big = vec![1.0f32; 64 << 20];
    let second = scope(&stream, |s| {
        let mut x = s.upload(&big)?;
        for _ in 0..4 {
            s.all_reduce_in_place(&comm, &mut x, Sum)?;
        }
        Ok::<_, Error>(())
    });
    println!("second = {}", variant_or_ok(&second));
    if let Err(e) = &second {
        println!("second_error = {e}");
    }
    Ok(())
}

/// How [`join_then_leave_child`] leaves.
enum Leave {
    /// Drops the member, then returns (the child's `main` exits).
    Drop,
    /// Exits the process with the member alive.
    Exit,
}

/// Joins the world from the environment, prints `joined = true`, and leaves at once.
fn join_then_leave_child(leave: Leave) -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    println!("joined = true");
    match leave {
        Leave::Drop => drop(comm),
        Leave::Exit => {
            use std::io::Write;
            std::io::stdout().flush()?;
            std::process::exit(0);
        }
    }
    Ok(())
}

/// Builds the world from the environment, joins, all-reduces rank + 1 and prints the
/// sum (`sum<rank> = ...`), the launcher and the device's ordinal.
fn join_and_reduce_child() -> TestResult {
    let world = World::from_env()?;
    println!("launcher = {:?}", world.launcher());
    let device = world.device()?;
    println!("ordinal{} = {}", world.rank(), device.ordinal());
    let comm = world.communicator(&device)?;
    let stream = device.new_stream()?;
    let mut out = [0f64; 3];
    let mine = [world.rank() as f64 + 1.0; 3];
    scope(&stream, |s| {
        let mut x = s.upload(&mine)?;
        s.all_reduce_in_place(&comm, &mut x, Sum)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    println!("sum{} = {}", world.rank(), out[0] as usize);
    exchange_across_processes(&comm, &stream)
}

/// Elements rank `from` sends rank `to` in [`exchange_across_processes`]: different in
/// each direction, none from rank 1 to itself.
fn exchange_count(from: usize, to: usize) -> usize {
    if from == 1 && to == 1 {
        0
    } else {
        1000 * (from + 1) + 37 * to
    }
}

/// The `i`-th element rank `from` sends rank `to`.
fn exchange_value(from: usize, to: usize, i: usize) -> u32 {
    (from * 1_000_000 + to * 100_000 + i) as u32
}

/// An `all_to_all_v` between the processes (the transports between processes differ
/// from those between threads): prints `exchange<rank> = ok` when every block came from
/// the right rank, whole.
fn exchange_across_processes(comm: &Communicator, stream: &stream_core::Stream) -> TestResult {
    let (rank, ranks) = (comm.rank(), comm.size());
    let send_counts: Vec<usize> = (0..ranks).map(|to| exchange_count(rank, to)).collect();
    let recv_counts: Vec<usize> = (0..ranks).map(|from| exchange_count(from, rank)).collect();
    let send: Vec<u32> = (0..ranks)
        .flat_map(|to| (0..send_counts[to]).map(move |i| exchange_value(rank, to, i)))
        .collect();
    let expected: Vec<u32> = (0..ranks)
        .flat_map(|from| (0..recv_counts[from]).map(move |i| exchange_value(from, rank, i)))
        .collect();
    let mut got = poisoned::<u32>(expected.len());
    scope(stream, |s| {
        let x = s.upload(&send)?;
        let mut y = s.alloc::<u32>(expected.len())?;
        s.all_to_all_v(comm, &x, &send_counts, &mut y, &recv_counts)?;
        s.copy_to_host(&y, &mut got)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let verdict = if got == expected { "ok" } else { "MISMATCH" };
    println!("exchange{rank} = {verdict}");
    Ok(())
}
