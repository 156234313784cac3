//! `run_owned` over a watched scope whose stream stalls until its watch gives up (the
//! one-GPU stand-in for a collective whose peer died, `device/watch/gate.rs`): the call
//! itself waits, bounded, and the future resolves to the watch's error. Before, the call
//! returned at once and the device's completion thread slept on the stalled work.
//! (With a real collective and two GPUs: `tests/test_nccl_hung.rs`.)
//!
//! Ignored without `--include-ignored`: it needs a GPU.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::device::watch::gate::{one_at_a_time, Gate, OpensGate};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::scope::Watch;

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn run_owned_over_a_stalled_watched_stream_waits_bounded_and_resolves_to_the_error() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let gate = Gate::default();
    let watch = Watch::new(Arc::new(OpensGate {
        gate: gate.clone(),
        after: Duration::from_millis(200),
    }));
    let start = Instant::now();
    let future = stream.run_owned(vec![0u8; 16], |s, _owned| {
        s.outstanding.watch(&watch);
        gate.stall(&s.stream.raw)
    });
    let returned = start.elapsed();
    gate.open();
    assert!(
        returned >= Duration::from_millis(200) && returned < Duration::from_secs(5),
        "run_owned returned after {returned:?}: its wait was not the watched one"
    );
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    let resolved = loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut context) {
            break out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the future never resolved"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        matches!(resolved, Err(Error::CollectiveTimedOut { .. })),
        "the future resolved to {:?}",
        resolved.map(drop)
    );
    Ok(())
}
