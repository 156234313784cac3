//! A look at a watched stream while another thread's driver call on it is under way (a
//! watchdog's marker record, which the driver can hold up behind a third thread's
//! `cuMemFreeHost` for as long as a hung collective): it does not wait for that call,
//! and counts the stream as busy. (Waiting for it held up the watchdog that must abort
//! the hang: `a_stall_behind_a_device_wide_call_under_way_is_ended_by_the_watchdog`
//! waited for the stall's 20 s limit.)

use std::sync::mpsc;
use std::time::Instant;

use super::{gate_watch, GIVES_UP_AFTER};
use crate::device::watch::gate::Gate;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::watched_stream_hooks::{
    holding_its_lease, listed_on_this_thread, looks_idle_or_gone,
};
use crate::scope::scope;

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_look_at_a_stream_with_a_call_under_way_counts_it_busy_without_waiting() -> Result<()> {
    // Held for half the watch's bound: the watchdog, which counts the stream busy
    // meanwhile, must not give up on it; far longer than a look that does not wait.
    let held_for = GIVES_UP_AFTER / 2;
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let gate = Gate::default(); // opened by the watch if it gives up; nothing stalls on it
    let (looked, took, after) = scope(&stream, |s| {
        s.watch_collective(&gate_watch(&gate));
        let id = listed_on_this_thread().expect("a scope that issued a collective is listed");
        // (A look of the watchdog's own can hold the lease for a query: a few tries.)
        let idle = || (0..100).any(|_| looks_idle_or_gone(id));
        assert!(idle(), "an idle stream, its lease free");
        let (held_tx, held) = mpsc::channel();
        let (looked, took) = std::thread::scope(|threads| {
            let holder = threads.spawn(move || {
                holding_its_lease(id, || {
                    let _ = held_tx.send(());
                    std::thread::sleep(held_for);
                })
            });
            held.recv().expect("the holder took the lease");
            let start = Instant::now();
            let looked = looks_idle_or_gone(id);
            let took = start.elapsed();
            assert!(holder.join().expect("no panic").is_some(), "it was listed");
            (looked, took)
        });
        Ok::<_, Error>((looked, took, idle()))
    })?;
    assert!(!looked, "a stream with a call under way counts as busy");
    assert!(took < held_for / 5, "the look waited {took:?} for the call");
    assert!(after, "idle again once the call returned");
    Ok(())
}
