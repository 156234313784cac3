//! What another thread of the process does while a scope here is behind a collective
//! whose peer died (a stalled, watched stream): the scope's watch must still give up
//! within its bound, and the other thread's call go on once it has.

use std::time::{Duration, Instant};

use super::{behind_a_stalled_watched_stream, gate_watch, is_timed_out, BOUNDED};
use crate::device::watch::gate::{one_at_a_time, trace, Gate};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::scope::scope;

/// Two threads, each in a scope behind a collective whose peer died (a stall of its own,
/// a watch of its own), one of them making a call that waits for the whole device
/// inside it (`trim_pinned_memory`), the other waiting for a download: each watch gives
/// up within its bound, and both scopes end with its error.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn two_threads_behind_stalled_watched_streams_each_give_up_within_the_bound() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    drop(device.alloc_pinned::<u32>(1 << 20)?); // cached: the trim frees it
    let start = Instant::now();
    let (trimming, downloading) = std::thread::scope(|threads| {
        let device = &device;
        let trimming = threads.spawn(move || {
            behind_a_stalled_watched_stream(device, || device.trim_pinned_memory(0))
        });
        let downloading = threads.spawn(move || {
            let mut pinned = device.alloc_pinned::<u32>(1024)?;
            let stream = device.new_stream()?;
            let gate = Gate::default();
            let mut waited = None;
            let ended = scope(&stream, |s| {
                let x = s.upload(&[7u32; 1024])?;
                s.watch_collective(&gate_watch(&gate));
                gate.stall(&s.stream.raw)?;
                waited = Some(s.copy_to_host(&x, &mut pinned[..])?.wait().map(drop));
                Ok::<_, Error>(())
            });
            gate.open();
            Ok::<_, Error>((waited.expect("the scope ran its closure"), ended))
        });
        (
            trimming.join().expect("no panic"),
            downloading.join().expect("no panic"),
        )
    });
    let took = start.elapsed();
    let (trimmed, _, trimming_ended) = trimming?;
    let (waited, downloading_ended) = downloading?;
    assert!(
        is_timed_out(&trimmed),
        "trim_pinned_memory returned {trimmed:?}"
    );
    assert!(
        is_timed_out(&trimming_ended),
        "its scope ended with {trimming_ended:?}"
    );
    assert!(
        is_timed_out(&waited),
        "the download's wait returned {waited:?}"
    );
    assert!(
        is_timed_out(&downloading_ended),
        "its scope ended with {downloading_ended:?}"
    );
    assert!(took < BOUNDED, "the two threads took {took:?}");
    Ok(())
}

/// Two threads, each in a scope behind a collective whose peer died: each scope's end
/// gives up within its bound, the other's stall notwithstanding.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn two_threads_ending_scopes_behind_stalled_watched_streams_give_up_within_the_bound() -> Result<()>
{
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let start = Instant::now();
    let ends = std::thread::scope(|threads| {
        let device = &device;
        let both = [(); 2]
            .map(|()| threads.spawn(move || behind_a_stalled_watched_stream(device, || Ok(()))));
        both.map(|thread| thread.join().expect("no panic"))
    });
    let took = start.elapsed();
    for end in ends {
        let (_, _, ended) = end?;
        assert!(is_timed_out(&ended), "a scope ended with {ended:?}");
    }
    assert!(took < BOUNDED, "the two threads took {took:?}");
    Ok(())
}

/// A call [`calls_on_another_thread_let_a_stalled_watched_scope_give_up`] makes on the
/// other thread: its name, and the call, given the device and a `ManagedVec` that only
/// "a ManagedVec's drop" drops (a drop waits for the whole device; the others leave it to
/// be dropped after the scope has ended).
type OtherThreadCall = (
    &'static str,
    fn(&Device, &mut Option<crate::ManagedVec<u32>>) -> Result<()>,
);

/// The calls, each made once per case.
const OTHER_THREAD_CALLS: [OtherThreadCall; 10] = [
    ("trim_pinned_memory", |device, _| {
        device.trim_pinned_memory(0).map(drop)
    }),
    ("a ManagedVec's drop", |_, managed| {
        drop(managed.take());
        Ok(())
    }),
    ("alloc_managed and its drop", |device, _| {
        device.alloc_managed::<u32>(1 << 20).map(drop)
    }),
    ("alloc_pinned of a new 64 MiB block", |device, _| {
        device.alloc_pinned::<u8>(64 << 20).map(drop)
    }),
    ("Device::new and its drop", |_, _| Device::new(0).map(drop)),
    ("new_stream and its drop", |device, _| {
        device.new_stream().map(drop)
    }),
    ("upload_vec", |device, _| {
        device.upload_vec(&[1u32; 16]).map(drop)
    }),
    ("trim_memory", |device, _| device.trim_memory(0)),
    (
        "alloc_vec of the whole GPU (its out-of-memory retry)",
        |device, _| out_of_memory_expected(device.alloc_vec::<u8>(device.total_memory()?)),
    ),
    (
        "alloc_vec larger than the GPU (refused at once)",
        |device, _| out_of_memory_expected(device.alloc_vec::<u8>(2 * device.total_memory()?)),
    ),
];

/// `Ok` for out of memory, as expected; the allocation's other outcomes as they are.
fn out_of_memory_expected<T>(allocated: Result<T>) -> Result<()> {
    match allocated {
        Err(Error::OutOfMemory { .. }) => Ok(()),
        other => other.map(drop),
    }
}

/// Each of [`OTHER_THREAD_CALLS`], made on another thread while a scope here is behind a
/// collective whose peer died and ending (its watch polling): the watch gives up within
/// its bound and the call returns, unless the call blocks this thread's driver calls
/// while it waits for the GPU (the failure lists which did, and how long each side took).
/// On an H200 (driver 580) the frees and the managed allocation waited for the stall,
/// until the watch gave up (200 ms); the rest did not wait for it (0.01-50 ms), but the
/// out-of-memory retry after a request of twice the card (550-650 ms, when such a
/// request still went to the driver) held the scope's end up as long; none kept the
/// watch from giving up in the end. A stall by a kernel spinning on the flag, as an NCCL
/// kernel spins, gave the same figures.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn calls_on_another_thread_let_a_stalled_watched_scope_give_up() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let mut held_up = Vec::new();
    // The scope's end starts polling at once, or once the other call has started; the
    // other thread makes its first CUDA call before the stall, or the call is its first.
    let cases = [
        (Duration::ZERO, false),
        (Duration::from_millis(50), false),
        (Duration::ZERO, true),
    ];
    for ((delay, warm), (call, make_call)) in cases
        .into_iter()
        .flat_map(|case| OTHER_THREAD_CALLS.map(|c| (case, c)))
    {
        // Cached: a trim frees it.
        drop(device.alloc_pinned::<u32>(1 << 20)?);
        let mut managed = Some(device.alloc_managed::<u32>(1024)?);
        let (stalled, is_stalled) = std::sync::mpsc::channel();
        let start = Instant::now();
        let (other, here) = std::thread::scope(|threads| {
            let managed = &mut managed;
            let device = &device;
            let other = threads.spawn(move || {
                let warmed = match warm {
                    true => device.new_stream().map(drop),
                    false => Ok(()),
                };
                is_stalled
                    .recv()
                    .expect("the scope stalls its stream first");
                let start = Instant::now();
                trace(format_args!("calls {call} on another thread"));
                let made = warmed.and(make_call(device, managed));
                trace(format_args!("{call} returned {made:?}"));
                (made, start.elapsed())
            });
            let here = behind_a_stalled_watched_stream(device, || {
                stalled.send(()).expect("the other thread waits for this");
                std::thread::sleep(delay);
                Ok(())
            });
            (other.join().expect("the other thread returns"), here)
        });
        let took = start.elapsed();
        let (_, _, ended) = here?;
        let (result, other_took) = other;
        println!(
            "{call} (warm thread: {warm}), the scope ending {delay:?} after: returned \
             {result:?} in {other_took:?}; the stalled scope took {took:?}"
        );
        result?;
        let bounded = |t: Duration| t < BOUNDED;
        if !(bounded(other_took) && bounded(took) && is_timed_out(&ended)) {
            held_up.push(format!(
                "{call} (warm thread: {warm}, the scope ending {delay:?} after: \
                 {other_took:?}; the scope {took:?}, {ended:?})"
            ));
        }
    }
    assert!(held_up.is_empty(), "held up: {held_up:#?}");
    Ok(())
}
