//! Ranks of one process that disagree on a call NCCL matches (a collective's length,
//! element type, reduction or root, a `PreMulSum`'s among them; a send longer or
//! shorter than its receive, alone or as blocks of `all_to_all_v`, `gather` and
//! `scatter`): the ledger refuses the later rank's call before it is issued
//! (`RanksDisagree`), that rank stands in for the earlier one's call on scratch memory
//! so it completes, and both ranks' scopes end with `RanksDisagree` at once, not at the
//! communicator's timeout; nothing past either rank's buffer is written, and the
//! communicators refuse every later call. One thread per rank (`join`, with and without
//! each device's pool granting the other access, what would let NCCL reach a peer's
//! buffer directly), one thread for both (`for_devices`, in a group: an all_reduce, and
//! an all_to_all_v whose blocks disagree), and the ranks of a split.
//!
//! Two GPUs (NCCL refuses two ranks on one); each scenario runs in a child process of
//! this binary ([`CHILD_ENV`]), since it aborts communicators on purpose.

use std::time::{Duration, Instant};

use gpu_tests::child::{run_self, two_gpu_main};
use gpu_tests::nccl_ranks::{
    error_variant, exclusive, print_whether_the_device_still_works, two_ranks, variant_or_ok,
    warm_up,
};
use gpu_tests::tests;
use gpu_tests::{ensure, TestResult};
use stream_core::nccl::{self, Communicator, Max, Sum};
use stream_core::{scope, Device, Error};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_NCCL_LEDGER_CHILD";

fn main() {
    two_gpu_main(
        "test_nccl_ledger",
        CHILD_ENV,
        &[
            ("lengths", lengths_child),
            ("grouped", grouped_child),
            ("exchange", exchange_child),
            ("split", split_child),
        ],
        tests![
            threads_that_disagree_are_refused_at_once_and_write_nothing_past_their_buffers,
            one_thread_that_disagrees_with_itself_in_a_group_is_refused,
            one_thread_whose_exchange_disagrees_with_itself_is_refused,
            the_ranks_of_a_split_are_compared_too,
        ],
    );
}

/// The calls [`lengths_child`] makes the two ranks disagree on.
const DISAGREEING: [&str; 12] = [
    "send_recv",
    "all_to_all_v",
    "gather",
    "scatter",
    "broadcast",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "reduction",
    "root",
    "pre_mul_sum",
    "pre_mul_sum_lengths",
];

/// Rank 0's and rank 1's lengths in [`lengths_child`].
const SHORT: usize = 4096;
const LONG: usize = 1 << 22;

/// The guard value around the buffers of [`lengths_child`].
const GUARD: f32 = 7.0;

/// How long the communicators wait before they time out: far longer than the test
/// allows for the refusal, so an end at the timeout fails it.
const TIMEOUT: Duration = Duration::from_secs(30);

/// In a child, with two GPUs, for each call of [`DISAGREEING`], on communicators that
/// never ran a collective (whose connections NCCL sets up inside the first call): rank
/// 0 passes [`SHORT`] elements and rank 1 [`LONG`] (or the same lengths with another
/// reduction or root), each buffer the front of a larger one whose rest holds a guard
/// value; once without and once with each device's pool granting the other access.
/// Both ranks end with `RanksDisagree` within seconds, neither guard changes, and both
/// communicators refuse what comes next.
fn threads_that_disagree_are_refused_at_once_and_write_nothing_past_their_buffers() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "ranks that disagree",
        &[(CHILD_ENV, Some("lengths"))],
        Duration::from_secs(200),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    for granted in ["plain", "granted"] {
        for case in DISAGREEING {
            let key = format!("{case}_{granted}");
            out.expect(&format!("{key}_guard"), "0")?;
            for rank in [0, 1] {
                out.expect(&format!("{key}_rank{rank}"), "RanksDisagree")?;
                let after = out.value(&format!("{key}_after{rank}"))?;
                ensure!(after != "ok", "{key}: rank {rank} went on after: {after}");
            }
            let took: f64 = out.value(&format!("{key}_s"))?.parse()?;
            ensure!(took < 10.0, "{key}: the ranks took {took} s to end.\n{out}");
        }
    }
    out.expect("device_still_works", "true")?;
    Ok(())
}

/// See [`threads_that_disagree_are_refused_at_once_and_write_nothing_past_their_buffers`].
fn lengths_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    for granted in ["plain", "granted"] {
        if granted == "granted" {
            grant_pools_both_ways(&d0, &d1)?;
        }
        for case in DISAGREEING {
            let (c0, c1) = two_ranks(&d0, &d1)?;
            let on_d1 = &d1;
            let start = Instant::now();
            let results = std::thread::scope(|t| {
                // A communicator is `Send`, not `Sync`: rank 1's moves to its thread.
                let one = t.spawn(move || disagreeing_rank(case, &c1, on_d1, LONG));
                let zero = disagreeing_rank(case, &c0, &d0, SHORT);
                [
                    zero,
                    one.join().unwrap_or_else(|_| Err("rank 1 panicked".into())),
                ]
            });
            println!("{case}_{granted}_s = {:.3}", start.elapsed().as_secs_f64());
            let mut changed = 0;
            for (rank, result) in results.into_iter().enumerate() {
                let (ended, after, guard_changed) = result?;
                println!("{case}_{granted}_rank{rank} = {ended}");
                println!("{case}_{granted}_after{rank} = {after}");
                changed += guard_changed;
            }
            println!("{case}_{granted}_guard = {changed}");
        }
    }
    print_whether_the_device_still_works(&d0.new_stream()?)
}

/// One rank's part of [`lengths_child`]: `case` on `len` elements at the front of
/// buffers twice as long as rank 1's. Returns how its scope ended ("ok", or the first
/// error's variant: the call's, the download's wait behind it, or the scope's end),
/// how a collective after it ended, and how many guard elements changed.
fn disagreeing_rank(
    case: &str,
    comm: &Communicator,
    device: &Device,
    len: usize,
) -> Result<(String, String, usize), gpu_tests::Failed> {
    comm.set_timeout(TIMEOUT);
    let stream = device.new_stream()?;
    let (ones, guard) = (vec![1f32; 2 * LONG], vec![GUARD; 2 * LONG]);
    let mut back = vec![0f32; 2 * LONG];
    let rank = comm.rank();
    // Each rank's own factor; the stand-in for the other's `PreMulSum` makes its own.
    let scaled = comm.pre_mul_sum(0.5 + rank as f32)?;
    // Lengths that agree where the disagreement is elsewhere.
    let len = if matches!(case, "reduction" | "root" | "pre_mul_sum") {
        SHORT
    } else {
        len
    };
    let used = if matches!(case, "all_gather" | "all_to_all_v" | "gather") {
        2 * len
    } else {
        len
    };
    let ended = scope(&stream, |s| {
        let src = s.upload(&ones)?;
        let mut dst = s.upload(&guard)?;
        let issued = {
            let (x, mut y) = (src.slice(..len)?, dst.slice_mut(..used)?);
            match case {
                "send_recv" if rank == 1 => s.send(comm, &x, 0),
                "send_recv" => s.recv(comm, &mut y, 1),
                "broadcast" => s.broadcast(comm, &x, &mut y, 1),
                "all_reduce" => s.all_reduce(comm, &x, &mut y, Sum),
                "all_gather" => s.all_gather(comm, &x, &mut y),
                "reduction" if rank == 1 => s.all_reduce(comm, &x, &mut y, Max),
                "reduction" => s.all_reduce(comm, &x, &mut y, Sum),
                "root" => s.broadcast(comm, &x, &mut y, rank),
                "pre_mul_sum" if rank == 1 => s.all_reduce(comm, &x, &mut y, Sum),
                "pre_mul_sum" | "pre_mul_sum_lengths" => s.all_reduce(comm, &x, &mut y, &scaled),
                // Each rank sends `len` to each: rank 0's block for rank 1 is shorter
                // than rank 1 expects, and the other way round (inside the group the
                // exchange opens, which keeps a stand-in's scratch memory to its end).
                "all_to_all_v" => {
                    let counts = [len, len];
                    s.all_to_all_v(comm, &src.slice(..used)?, &counts, &mut y, &counts)
                }
                // To and from rank 0, in blocks of its length and rank 1's.
                "gather" => s.gather(comm, &x, &mut y, 0),
                "scatter" => s.scatter(comm, &src.slice(..2 * len)?, &mut y, 0),
                _ => s.reduce_scatter(comm, &src.slice(..2 * len)?, &mut y, Sum),
            }
        };
        // Behind the call (refused or not), bounded like the scope's end; the guard is
        // read from what it brings back.
        let waited = s.copy_to_host(&dst, &mut back)?.wait().map(drop);
        Ok::<_, Error>(issued.and(waited))
    });
    let changed = back[used..].iter().filter(|&&v| v != GUARD).count();
    let ended = match ended {
        Ok(Ok(())) => "ok",
        Ok(Err(e)) | Err(e) => error_variant(&e),
    };
    let after = scope(&stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.all_reduce_in_place(comm, &mut x, Sum)
    });
    let after = variant_or_ok(&after);
    Ok((ended.to_string(), after.to_string(), changed))
}

/// Each device's pool grants the other access, through a fork onto the other device's
/// stream that lends it a buffer.
fn grant_pools_both_ways(d0: &Device, d1: &Device) -> TestResult {
    for (a, b) in [(d0, d1), (d1, d0)] {
        let (on_a, on_b) = (a.new_stream()?, b.new_stream()?);
        scope(&on_a, |s| {
            let mut x = s.alloc_zeroed::<f32>(16)?;
            s.fork(&on_b, (&mut x,), |c, (mut x,)| c.fill(&mut x, 1.0))?;
            Ok::<_, Error>(())
        })?;
    }
    Ok(())
}

/// In a child, with two GPUs and one thread driving both (`for_devices`, connections
/// set up by a first grouped all_reduce): in one group, device 0's all_reduce of
/// [`SHORT`] elements and device 1's of twice as many. The group returns
/// `RanksDisagree` (device 1's call was not issued: it stood in for device 0's on
/// scratch memory the group kept to its end), device 0's scope ends with it within
/// seconds, and both
/// communicators refuse what comes next.
fn one_thread_that_disagrees_with_itself_in_a_group_is_refused() -> TestResult {
    one_thread_is_refused("one thread that disagrees with itself", "grouped", &[])
}

/// Runs the one-thread child `mode` (`what`, for its messages) and checks what each
/// prints: its group and device 0's scope ended with `RanksDisagree` within 10 s, both
/// communicators refuse what comes next, the device still copies, and every other
/// `(key, value)` of `more` printed as given.
fn one_thread_is_refused(what: &str, mode: &str, more: &[(&str, &str)]) -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(what, &[(CHILD_ENV, Some(mode))], Duration::from_secs(90))?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    let refused = [("group", "RanksDisagree"), ("scope", "RanksDisagree")];
    for (key, value) in refused.iter().chain(more) {
        out.expect(key, value)?;
    }
    for device in [0, 1] {
        let after = out.value(&format!("after{device}"))?;
        ensure!(
            after != "ok",
            "device {device}'s communicator went on: {after}"
        );
    }
    let took: f64 = out.value("took_s")?.parse()?;
    ensure!(took < 10.0, "{what}: took {took} s to end.\n{out}");
    out.expect("device_still_works", "true")?;
    Ok(())
}

/// See [`one_thread_that_disagrees_with_itself_in_a_group_is_refused`].
fn grouped_child() -> TestResult {
    let devices = [Device::new(0)?, Device::new(1)?];
    let comms = Communicator::for_devices(&devices)?;
    let streams = [devices[0].new_stream()?, devices[1].new_stream()?];
    // Returns the group's result and the scopes' (the outer scope's end reports device
    // 0's call).
    let grouped = |lengths: [usize; 2]| {
        let mut group = None;
        let ended = scope(&streams[0], |a| {
            scope(&streams[1], |b| {
                let mut x = a.alloc_zeroed::<f32>(lengths[0])?;
                let mut y = b.alloc_zeroed::<f32>(lengths[1])?;
                group = Some(nccl::group(|g| {
                    g.all_reduce_in_place(a, &comms[0], &mut x, Sum)?;
                    g.all_reduce_in_place(b, &comms[1], &mut y, Sum)
                }));
                Ok::<_, Error>(())
            })
        });
        (group.unwrap_or(Ok(())), ended)
    };
    let (group, ended) = grouped([SHORT, SHORT]);
    group?;
    ended?;
    for comm in &comms {
        comm.set_timeout(TIMEOUT);
    }
    let start = Instant::now();
    let (group, ended) = grouped([SHORT, 2 * SHORT]);
    println!("took_s = {:.3}", start.elapsed().as_secs_f64());
    println!("group = {}", variant_or_ok(&group));
    println!("scope = {}", variant_or_ok(&ended));
    for (i, comm) in comms.iter().enumerate() {
        println!("after{i} = {}", variant_or_ok(&comm.check()));
    }
    print_whether_the_device_still_works(&streams[0])
}

/// In a child, with two GPUs and one thread driving both (`for_devices`): in one group,
/// each device's `all_to_all_v` (a send and a receive per device, each compared by the
/// ledger as it is made), device 0's blocks [`SHORT`] long and device 1's twice as long,
/// sent and expected alike: device 1's block for device 0 is longer than device 0
/// receives. The group returns `RanksDisagree` within seconds, nothing past device 0's
/// receive buffer changes, device 0's scope ends with the error, and both communicators
/// refuse what comes next.
fn one_thread_whose_exchange_disagrees_with_itself_is_refused() -> TestResult {
    one_thread_is_refused(
        "one thread whose exchange disagrees with itself",
        "exchange",
        &[("agreeing", "ok"), ("changed", "0")],
    )
}

/// See [`one_thread_whose_exchange_disagrees_with_itself_is_refused`].
fn exchange_child() -> TestResult {
    let devices = [Device::new(0)?, Device::new(1)?];
    let comms = Communicator::for_devices(&devices)?;
    let streams = [devices[0].new_stream()?, devices[1].new_stream()?];
    // Device d sends and expects blocks of `blocks[d]`; device 0's receive buffer is the
    // front of one twice as long whose rest holds GUARD. Returns the group's result, the
    // scopes' (the outer scope's end reports device 0's calls) and how many guard values
    // changed.
    let exchange = |blocks: [usize; 2]| {
        let (l0, l1) = (blocks[0], blocks[1]);
        let (ones0, guard0, ones1) = (vec![1f32; 2 * l0], vec![GUARD; 4 * l0], vec![1f32; 2 * l1]);
        let mut back = vec![0f32; 4 * l0];
        let mut group = None;
        let ended = scope(&streams[0], |a| {
            let x0 = a.upload(&ones0)?;
            let mut y0 = a.upload(&guard0)?;
            let inner = scope(&streams[1], |b| {
                let x1 = b.upload(&ones1)?;
                let mut y1 = b.alloc_zeroed::<f32>(2 * l1)?;
                let mut into0 = y0.slice_mut(..2 * l0)?;
                group = Some(nccl::group(|g| {
                    g.all_to_all_v(a, &comms[0], &x0, &[l0, l0], &mut into0, &[l0, l0])?;
                    g.all_to_all_v(b, &comms[1], &x1, &[l1, l1], &mut y1, &[l1, l1])
                }));
                Ok::<_, Error>(())
            });
            // Whatever device 1's scope reported: the copy is behind device 0's calls,
            // and this scope's end waits for it before `back` is read.
            let copied = a.copy_to_host(&y0, &mut back).map(drop);
            inner.and(copied)
        });
        let changed = back[2 * l0..].iter().filter(|&&v| v != GUARD).count();
        (group.unwrap_or(Ok(())), ended, changed)
    };
    let (group, ended, _) = exchange([SHORT, SHORT]);
    println!("agreeing = {}", variant_or_ok(&group.and(ended)));
    for comm in &comms {
        comm.set_timeout(TIMEOUT);
    }
    let start = Instant::now();
    let (group, ended, changed) = exchange([SHORT, 2 * SHORT]);
    println!("took_s = {:.3}", start.elapsed().as_secs_f64());
    println!("group = {}", variant_or_ok(&group));
    println!("scope = {}", variant_or_ok(&ended));
    println!("changed = {changed}");
    for (i, comm) in comms.iter().enumerate() {
        println!("after{i} = {}", variant_or_ok(&comm.check()));
    }
    print_whether_the_device_still_works(&streams[0])
}

/// In a child, with two GPUs: the two ranks (one thread each) split their communicator
/// with one color, and disagree on an all_reduce's length on the new one: both end with
/// `RanksDisagree`; the parent communicator still works.
fn the_ranks_of_a_split_are_compared_too() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "the ranks of a split",
        &[(CHILD_ENV, Some("split"))],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    for rank in [0, 1] {
        out.expect(&format!("child{rank}"), "RanksDisagree")?;
        out.expect(&format!("parent{rank}"), "ok")?;
    }
    Ok(())
}

/// See [`the_ranks_of_a_split_are_compared_too`].
fn split_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (c0, c1) = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1))?;
    let rank = |comm: Communicator, device: &Device, len: usize| -> TestResult {
        let stream = device.new_stream()?;
        let r = comm.rank();
        let part = comm.split(Some(3))?.ok_or("no part of the split")?;
        part.set_timeout(TIMEOUT);
        // Where each rank got to, should one hang.
        println!("split{r} = done");
        let ended = scope(&stream, |s| {
            let mut x = s.alloc_zeroed::<f32>(len)?;
            let issued = s.all_reduce_in_place(&part, &mut x, Sum);
            println!("issued{r} = {}", variant_or_ok(&issued));
            issued
        });
        println!("child{r} = {}", variant_or_ok(&ended));
        let parent = scope(&stream, |s| {
            let mut x = s.alloc_zeroed::<f32>(16)?;
            s.all_reduce_in_place(&comm, &mut x, Sum)
        });
        println!("parent{r} = {}", variant_or_ok(&parent));
        Ok(())
    };
    std::thread::scope(|t| {
        let one = t.spawn(|| rank(c1, &d1, 2 * SHORT));
        rank(c0, &d0, SHORT)?;
        one.join().map_err(|_| "rank 1 panicked")?
    })
}
