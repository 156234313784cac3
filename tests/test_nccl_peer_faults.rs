//! What one rank's fault leaves the other ranks.
//!
//! **A rank of this process aborted** (here by its scope's timeout): its siblings, the
//! other ranks of the communicator in this process, cannot complete a collective
//! without it, and NCCL lets them believe they did. Measured before the ledger knew of
//! aborts (2x H200, NCCL 2.28.3): rank 1's all_reduce issued after rank 0 timed out
//! returned `Ok` in 7 ms, its buffer half zeros and half partial sums; so did one that
//! was already queued behind other work when rank 0 was aborted. Now the first is
//! refused before anything is issued and the second is stopped by its scope's end, both
//! with `CommunicatorAborted`; a split, which would wait inside NCCL for the aborted
//! rank forever, is refused too; device memory that reuses the aborted rank's is
//! untouched, and both devices work after it. **A rank of this process that left** (its
//! `Communicator` dropped) is no worse for NCCL (a sibling's all_reduce waited for its
//! timeout), but that wait is 10 minutes by default: now its siblings' collectives,
//! sends and receives with it that it never made the match of, and splits, are refused
//! at once, and a call already waiting for it is stopped by its scope's end.
//!
//! **Ranks of different processes** are out of the ledger's sight. An aborted peer
//! leaves a rank's next call returning as above, but no rank hanging; ranks that
//! disagree on a length write nothing past their own buffers and none hangs past its
//! timeout, though not every call ends in an error (a send and a shorter or longer
//! receive both return `Ok`). The `nccl` module docs ("When a peer dies", "Lengths that
//! disagree across ranks") say what a program must do about it.
//!
//! Two GPUs (NCCL refuses two ranks on one); each scenario runs in a child process of
//! this binary ([`CHILD_ENV`]), since it aborts communicators on purpose.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpu_tests::child::{run_self, two_gpu_main, ChildOutput};
use gpu_tests::nccl_ranks::{
    exclusive, still_copies, two_ranks as ranks_of_one_process, variant_or_ok, warm_up,
};
use gpu_tests::rank_processes::two_ranks;
use gpu_tests::{ensure, spin, tests, TestResult};
use stream_core::nccl::{Communicator, Sum, World};
use stream_core::{scope, Device, DeviceVec, Error, Stream};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_NCCL_PEER_FAULTS_CHILD";

/// Elements of each rank's buffer (4 MiB of `u32`).
const N: usize = 1 << 20;

fn main() {
    two_gpu_main(
        "test_nccl_peer_faults",
        CHILD_ENV,
        &[
            ("late", late_child),
            ("queued", queued_child),
            ("apart", apart_child),
            ("disagree", disagree_child),
            ("left", left_child),
            ("left_after", left_after_child),
        ],
        tests![
            a_call_after_a_siblings_abort_is_refused,
            a_call_queued_when_a_sibling_is_aborted_is_stopped,
            a_peer_process_aborted_leaves_no_rank_hanging,
            ranks_of_two_processes_that_disagree_write_only_their_own_buffers,
            a_call_after_a_sibling_left_is_refused,
            the_calls_a_sibling_made_before_it_left_still_complete,
        ],
    );
}

/// Rank 0 times out alone; then rank 1 (same process, same thread) makes the matching
/// all_reduce, twice, and a split: all refused at once with `CommunicatorAborted`, its
/// buffer untouched; its `check` says so too.
fn a_call_after_a_siblings_abort_is_refused() -> TestResult {
    let out = run_child("late")?;
    out.expect("rank0", "CollectiveTimedOut")?;
    expect_refused_at_once(&out)?;
    out.expect("check", "CommunicatorAborted")?;
    expect_untouched_and_working(&out)
}

/// Rank 1's all_reduce is issued behind 3 s of spinning on its stream; rank 0 times out
/// after 1 s, alone. Rank 1's scope stops its call (its end aborts rank 1 too) and
/// returns `CommunicatorAborted` once the spinning is over, not `Ok` with the values
/// NCCL left.
fn a_call_queued_when_a_sibling_is_aborted_is_stopped() -> TestResult {
    let out = run_child("queued")?;
    out.expect("rank0", "CollectiveTimedOut")?;
    out.expect("rank1", "CommunicatorAborted")?;
    out.expect("rank1_aborted", "true")?;
    let took: f64 = out.value("rank1_s")?.parse()?;
    ensure!(
        (2.5..30.0).contains(&took),
        "rank 1's scope ended after {took} s (3 s of spinning, then the stopped call).\n{out}"
    );
    expect_untouched_and_working(&out)
}

/// Rank 1's two all_reduces ([`print_rank1_rounds`]) and its split were refused at once
/// with `CommunicatorAborted`, its buffer untouched.
fn expect_refused_at_once(out: &ChildOutput) -> TestResult {
    for round in 0..2 {
        out.expect(&format!("rank1_{round}"), "CommunicatorAborted")?;
        out.expect(&format!("rank1_{round}_values"), &format!("2x{N}"))?;
        let took: f64 = out.value(&format!("rank1_{round}_s"))?.parse()?;
        ensure!(
            took < 0.5,
            "rank 1's call took {took} s to be refused.\n{out}"
        );
    }
    out.expect("split", "CommunicatorAborted")
}

/// Runs child `mode`, one at a time, and checks that it exited normally.
fn run_child(mode: &'static str) -> Result<ChildOutput, gpu_tests::Failed> {
    let _one_at_a_time = exclusive();
    let out = run_self(mode, &[(CHILD_ENV, Some(mode))], Duration::from_secs(90))?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    Ok(out)
}

/// The memory allocated on rank 0's device after its abort kept its values, and both
/// devices still copy.
fn expect_untouched_and_working(out: &ChildOutput) -> TestResult {
    out.expect("sentinel", &format!("7x{N}"))?;
    out.expect("device0_works", "true")?;
    out.expect("device1_works", "true")
}

/// See [`a_call_after_a_siblings_abort_is_refused`].
fn late_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (d0.new_stream()?, d1.new_stream()?);
    let (zero, one) = warm_up(ranks_of_one_process(&d0, &d1)?, (&d0, &d1))?;
    zero.set_timeout(Duration::from_secs(1));
    one.set_timeout(Duration::from_secs(3));
    let timed_out = all_reduce_of(&zero, &s0, 1, &mut vec![0; N]);
    println!("rank0 = {}", variant_or_ok(&timed_out));
    let sentinel = d0.upload_vec(&vec![7u32; N])?;
    print_rank1_rounds(&one, &s1);
    println!("split = {}", variant_or_ok(&one.split(Some(0)).map(drop)));
    println!("check = {}", variant_or_ok(&one.check()));
    print_sentinel_and_devices(&sentinel, [&s0, &s1])
}

/// See [`a_call_queued_when_a_sibling_is_aborted_is_stopped`].
fn queued_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (d0.new_stream()?, d1.new_stream()?);
    let (zero, one) = warm_up(ranks_of_one_process(&d0, &d1)?, (&d0, &d1))?;
    zero.set_timeout(Duration::from_secs(1));
    one.set_timeout(Duration::from_secs(20));
    let start = Instant::now();
    let rank1 = std::thread::spawn(move || {
        let twos = vec![2u32; N];
        let mut back = vec![0u32; N];
        let stopped = scope(&s1, |s| {
            spin(s, 6_000_000_000)?; // about 3 s
            let mut x = s.upload(&twos)?;
            s.all_reduce_in_place(&one, &mut x, Sum)?;
            s.copy_to_host(&x, &mut back)?.wait()?;
            Ok::<_, Error>(())
        });
        (stopped, start.elapsed().as_secs_f64(), one.is_aborted(), s1)
    });
    let timed_out = all_reduce_of(&zero, &s0, 1, &mut vec![0; N]);
    println!("rank0 = {}", variant_or_ok(&timed_out));
    let sentinel = d0.upload_vec(&vec![7u32; N])?;
    let (stopped, took, aborted, s1) = rank1.join().map_err(|_| "rank 1 panicked")?;
    println!("rank1 = {}", variant_or_ok(&stopped));
    println!("rank1_s = {took:.3}");
    println!("rank1_aborted = {aborted}");
    print_sentinel_and_devices(&sentinel, [&s0, &s1])
}

/// Two all_reduces of `N` twos on `stream` through rank 1's `comm`, each printed as
/// `rank1_<round>` (what it returned), `_s` (how long it took) and `_values` (the
/// buffer's values afterwards).
fn print_rank1_rounds(comm: &Communicator, stream: &Stream) {
    for round in 0..2 {
        let start = Instant::now();
        let mut back = vec![2u32; N];
        let ended = all_reduce_of(comm, stream, 2, &mut back);
        println!("rank1_{round} = {}", variant_or_ok(&ended));
        println!("rank1_{round}_s = {:.3}", start.elapsed().as_secs_f64());
        println!("rank1_{round}_values = {}", histogram(&back));
    }
}

/// An all_reduce of `N` copies of `value` on `stream` through `comm`, downloaded into
/// `back` when it completes.
fn all_reduce_of(
    comm: &Communicator,
    stream: &Stream,
    value: u32,
    back: &mut [u32],
) -> Result<(), Error> {
    let values = vec![value; N];
    scope(stream, |s| {
        let mut x = s.upload(&values)?;
        s.all_reduce_in_place(comm, &mut x, Sum)?;
        s.copy_to_host(&x, back)?.wait()?;
        Ok(())
    })
}

/// Prints the values of `sentinel` (after half a second, for anything late to land)
/// and whether each stream still copies.
fn print_sentinel_and_devices(sentinel: &DeviceVec<u32>, streams: [&Stream; 2]) -> TestResult {
    std::thread::sleep(Duration::from_millis(500));
    println!("sentinel = {}", histogram(&sentinel.to_host_vec()?));
    for (i, stream) in streams.into_iter().enumerate() {
        println!(
            "device{i}_works = {}",
            still_copies(stream).unwrap_or(false)
        );
    }
    Ok(())
}

/// The distinct values of `values` with their counts, `7x1048576 9x3`.
fn histogram(values: &[u32]) -> String {
    let mut counts = BTreeMap::new();
    for &v in values {
        *counts.entry(v).or_insert(0usize) += 1;
    }
    let shown: Vec<String> = counts
        .iter()
        .take(6)
        .map(|(v, n)| format!("{v}x{n}"))
        .collect();
    shown.join(" ")
}

/// Two processes: rank 0 times out alone and is aborted; 2.5 s later rank 1 makes the
/// matching all_reduce, then another. The ledger cannot see across processes, and NCCL
/// lets rank 1's first call return (measured: `Ok` in 2 ms, half its values reduced
/// with rank 0's, half its own); what must hold is that rank 1 is not left hanging: its
/// second call ends at its 3 s timeout with `CollectiveTimedOut`.
fn a_peer_process_aborted_leaves_no_rank_hanging() -> TestResult {
    let _one_at_a_time = exclusive();
    let [zero, one] = two_ranks(CHILD_ENV, "apart", |_| Vec::new())?;
    for (rank, out) in [(0, &zero), (1, &one)] {
        ensure!(out.status.success(), "rank {rank} failed.\n{out}");
    }
    zero.expect("rank0", "CollectiveTimedOut")?;
    let first = one.value("rank1_0")?;
    ensure!(
        first == "ok" || first == "CollectiveTimedOut",
        "rank 1's first call after rank 0's abort: {first}.\n{one}"
    );
    one.expect("rank1_1", "CollectiveTimedOut")?;
    let took: f64 = one.value("rank1_1_s")?.parse()?;
    ensure!(
        (2.9..30.0).contains(&took),
        "rank 1's second call ended after {took} s (timeout 3 s).\n{one}"
    );
    Ok(())
}

/// See [`a_peer_process_aborted_leaves_no_rank_hanging`]: one rank of two processes.
fn apart_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    let stream = device.new_stream()?;
    all_reduce_of(&comm, &stream, 1, &mut vec![0; N])?;
    if world.rank() == 0 {
        comm.set_timeout(Duration::from_secs(1));
        let timed_out = all_reduce_of(&comm, &stream, 1, &mut vec![0; N]);
        println!("rank0 = {}", variant_or_ok(&timed_out));
        // Alive while rank 1 calls: a process that exits would be a dead peer instead.
        std::thread::sleep(Duration::from_secs(8));
        return Ok(());
    }
    comm.set_timeout(Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(2500));
    print_rank1_rounds(&comm, &stream);
    Ok(())
}

/// Two processes whose ranks disagree on a length, each case on a fresh communicator
/// with a 3 s timeout, both ways round (rank 0 four times longer, then rank 1):
/// `all_reduce`, `all_gather`, a send and its receive, `broadcast`. Each rank's buffer
/// is followed by a guard of its own values: nothing is written there, on either rank,
/// and every call ends within its timeout (`Ok` or an `Err`; which, NCCL decides).
fn ranks_of_two_processes_that_disagree_write_only_their_own_buffers() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = two_ranks(CHILD_ENV, "disagree", |_| Vec::new())?;
    for (rank, out) in ranks.iter().enumerate() {
        ensure!(out.status.success(), "rank {rank} failed.\n{out}");
        let own = format!("{}x", rank + 1);
        for case in DISAGREEING {
            for longer in 0..2 {
                let key = format!("{case}_longer{longer}");
                let beyond = out.value(&format!("{key}_beyond"))?;
                ensure!(
                    beyond.starts_with(&own) && !beyond.contains(' '),
                    "rank {rank}, {key}: written past the buffer: {beyond}.\n{out}"
                );
                let took: f64 = out.value(&format!("{key}_s"))?.parse()?;
                ensure!(
                    took < 15.0,
                    "rank {rank}, {key}: ended after {took} s.\n{out}"
                );
                out.value(&key)?;
            }
        }
    }
    Ok(())
}

/// The collectives [`disagree_child`] runs with lengths that disagree.
const DISAGREEING: [&str; 4] = ["all_reduce", "all_gather", "send_recv", "broadcast"];

/// Elements of the guard after each buffer.
const GUARD: usize = 1 << 16;

/// See [`ranks_of_two_processes_that_disagree_write_only_their_own_buffers`]: one rank
/// of two processes. Rank `r`'s memory holds `r + 1` everywhere before each case; the
/// case uses its first `len` elements (`2 len` for all_gather's receive), the longer
/// rank's `len` four times the other's; prints what the call returned, how long it
/// took, and the values past what it used.
fn disagree_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let rank = world.rank();
    let stream = device.new_stream()?;
    // Each case on a fresh communicator: a disagreement may leave it aborted.
    for case in DISAGREEING {
        for longer in [0usize, 1] {
            let comm = world.communicator(&device)?;
            comm.set_timeout(Duration::from_secs(3));
            let len = if rank == longer { N } else { N / 4 };
            let fill = (rank + 1) as u32;
            let mut memory = device.upload_vec(&vec![fill; 2 * N + GUARD])?;
            let mine = vec![fill; len];
            let start = Instant::now();
            let ended = scope(&stream, |s| {
                let mut x = s.attach(&mut memory)?;
                let (mut head, _) =
                    x.split_at_mut(if case == "all_gather" { 2 * len } else { len })?;
                match case {
                    "all_reduce" => s.all_reduce_in_place(&comm, &mut head, Sum),
                    "all_gather" => s.all_gather(&comm, &s.upload(&mine)?, &mut head),
                    "broadcast" => s.broadcast_in_place(&comm, &mut head, 0),
                    _ if rank == 0 => s.send(&comm, &head, 1),
                    _ => s.recv(&comm, &mut head, 0),
                }
            });
            // Read after the scope's end, whatever it returned: its stream has drained.
            let back = memory.to_host_vec()?;
            let used = if case == "all_gather" { 2 * len } else { len };
            let key = format!("{case}_longer{longer}");
            println!("{key} = {}", variant_or_ok(&ended));
            println!("{key}_s = {:.3}", start.elapsed().as_secs_f64());
            println!("{key}_used = {}", histogram(&back[..used]));
            println!("{key}_beyond = {}", histogram(&back[used..]));
        }
    }
    Ok(())
}

/// Rank 0's communicator is dropped (a member that left, with nothing of its own
/// pending); rank 1 (same process) then makes an all_reduce, twice, and a split: all
/// refused at once with `CommunicatorAborted`, where they would otherwise wait for its
/// timeout (measured: `CollectiveTimedOut` after its 2 s), its buffer untouched.
fn a_call_after_a_sibling_left_is_refused() -> TestResult {
    let out = run_child("left")?;
    expect_refused_at_once(&out)?;
    out.expect("waiting", "CommunicatorAborted")?;
    let took: f64 = out.value("waiting_s")?.parse()?;
    ensure!(
        (0.4..10.0).contains(&took),
        "the call waiting for the rank that left ended after {took} s (timeout 20 s).\n{out}"
    );
    expect_untouched_and_working(&out)
}

/// See [`a_call_after_a_sibling_left_is_refused`]; then, on a fresh pair, rank 1's
/// all_reduce is issued first and rank 0's communicator dropped 0.5 s later: rank 1's
/// scope stops the call that waits for it.
fn left_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (d0.new_stream()?, d1.new_stream()?);
    let (zero, one) = warm_up(ranks_of_one_process(&d0, &d1)?, (&d0, &d1))?;
    one.set_timeout(Duration::from_secs(2));
    drop(zero);
    let sentinel = d0.upload_vec(&vec![7u32; N])?;
    print_rank1_rounds(&one, &s1);
    println!("split = {}", variant_or_ok(&one.split(Some(0)).map(drop)));
    drop(one);
    let (zero, one) = warm_up(ranks_of_one_process(&d0, &d1)?, (&d0, &d1))?;
    one.set_timeout(Duration::from_secs(20));
    let start = Instant::now();
    let rank1 = std::thread::spawn(move || {
        let waited = all_reduce_of(&one, &s1, 2, &mut vec![0; N]);
        (waited, start.elapsed().as_secs_f64(), s1)
    });
    std::thread::sleep(Duration::from_millis(500));
    drop(zero);
    let (waited, took, s1) = rank1.join().map_err(|_| "rank 1 panicked")?;
    println!("waiting = {}", variant_or_ok(&waited));
    println!("waiting_s = {took:.3}");
    print_sentinel_and_devices(&sentinel, [&s0, &s1])
}

/// Rank 1 (same process, its own thread) broadcasts 4 KiB as root, its scope ends
/// (NCCL completes a small broadcast on the root before the other rank makes its part:
/// measured on 2x H200) and its communicator is dropped; only then rank 0 makes the
/// matching broadcast, which completes with the root's values (it was refused as
/// "left" before: found as a flaky `test_nccl_gather_scatter` on 2x H200, whose root
/// had done so). The same with a send of 4 KiB and its receive, which NCCL completes
/// only together (rank 0 makes it after 2 s). A call past what rank 1 made is refused
/// at once.
fn the_calls_a_sibling_made_before_it_left_still_complete() -> TestResult {
    let out = run_child("left_after")?;
    out.expect("broadcast_order", "left_first")?;
    for call in ["recv", "broadcast"] {
        out.expect(call, "ok")?;
        out.expect(&format!("{call}_values"), "true")?;
        out.expect(&format!("{call}_next"), "CommunicatorAborted")?;
    }
    Ok(())
}

/// Elements [`left_after_child`] moves (4 KiB of `u32`).
const SMALL: usize = 1024;

/// See [`the_calls_a_sibling_made_before_it_left_still_complete`].
fn left_after_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let s0 = d0.new_stream()?;
    for call in ["broadcast", "recv"] {
        let (zero, one) = warm_up(ranks_of_one_process(&d0, &d1)?, (&d0, &d1))?;
        zero.set_timeout(Duration::from_secs(20));
        let on_d1 = &d1;
        let (left_tx, left_rx) = std::sync::mpsc::channel();
        let (result, values, order) = std::thread::scope(|t| {
            t.spawn(move || {
                let stream = on_d1.new_stream()?;
                let ended = scope(&stream, |s| {
                    let x = s.upload(&[9u32; SMALL])?;
                    match call {
                        "recv" => s.send(&one, &x, 0),
                        _ => s.broadcast(&one, &x, &mut s.alloc::<u32>(SMALL)?, 1),
                    }
                });
                drop(one);
                let _ = left_tx.send(());
                ended
            });
            // Rank 1's part may need rank 0's (a send does): wait for it to leave at
            // most 2 s, then make the matching call either way.
            let order = match left_rx.recv_timeout(Duration::from_secs(2)) {
                Ok(()) => "left_first",
                Err(_) => "call_first",
            };
            let mut back = vec![0u32; SMALL];
            let result = scope(&s0, |s| {
                let mut y = s.alloc_zeroed::<u32>(SMALL)?;
                match call {
                    "recv" => s.recv(&zero, &mut y, 1)?,
                    _ => s.broadcast_in_place(&zero, &mut y, 1)?,
                }
                s.copy_to_host(&y, &mut back)?.wait().map(drop)
            });
            (result, back.iter().all(|&v| v == 9), order)
        });
        let next = scope(&s0, |s| {
            let mut y = s.alloc_zeroed::<u32>(SMALL)?;
            s.broadcast_in_place(&zero, &mut y, 1)
        });
        println!("{call}_order = {order}");
        println!("{call} = {}", variant_or_ok(&result));
        println!("{call}_values = {values}");
        println!("{call}_next = {}", variant_or_ok(&next));
    }
    Ok(())
}
