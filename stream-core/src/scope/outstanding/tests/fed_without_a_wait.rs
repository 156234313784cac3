//! The watchdog beside a scope whose thread keeps its stream busy and never waits: work
//! that completes (here, stalls that the host ends in turn, as kernels end) is progress,
//! which the watchdog's markers on the stream see, so the watch is not asked past its
//! time. A stall that does not end is still given up on (`beside_another_threads_stall.rs`).

use std::time::{Duration, Instant};

use super::{gate_watch, GIVES_UP_AFTER};
use crate::device::watch::gate::{one_at_a_time, Gate};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::scope::scope;

/// How long each piece of work lasts: a tenth of the watch's time.
const PIECE: Duration = Duration::from_millis(20);

/// A stream kept busy for three times the watch's time by 30 stalls of 20 ms, each ended
/// by the host as the next is queued (so at most 40 ms of work ahead of any marker), its
/// thread never waiting: the watch never gives up, and the scope ends without an error.
/// (Counting the stream's busy time alone, the watchdog gave up after 200 ms.)
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_stream_fed_without_a_wait_is_not_given_up_on_while_it_moves() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let pieces: Vec<Gate> = (0..30).map(|_| Gate::default()).collect();
    // Opened by the watch if it gives up; nothing waits on it.
    let gave_up = Gate::default();
    let mut fed_for = Duration::ZERO;
    let ended = scope(&stream, |s| {
        s.watch_collective(&gate_watch(&gave_up));
        let start = Instant::now();
        for (i, piece) in pieces.iter().enumerate() {
            piece.stall(&s.stream.raw)?;
            std::thread::sleep(PIECE);
            if let Some(before) = i.checked_sub(1).and_then(|i| pieces.get(i)) {
                before.open();
            }
        }
        fed_for = start.elapsed();
        pieces.iter().for_each(Gate::open);
        Ok::<_, Error>(())
    });
    eprintln!("a stream fed without a wait for {fed_for:?}: its scope ended with {ended:?}");
    assert!(fed_for >= 3 * GIVES_UP_AFTER, "fed for {fed_for:?} only");
    assert!(ended.is_ok(), "the scope ended with {ended:?}");
    Ok(())
}
