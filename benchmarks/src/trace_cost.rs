//! Case 14: what the trace recorder (`stream_core::trace`) costs on the host, in one
//! run: tiny-kernel launches and empty forks in untraced scopes (the recorder off: the
//! library's usual rows, one atomic load per operation more than before it existed) and
//! in traced ones (each launch two timing events, each fork and join four and two
//! arrows), against the same raw driver calls.
//!
//! The untraced rows keep the launch and scope cases' target (≤ 1.03x of raw); the traced
//! rows have none: they say what recording costs.

use std::time::Instant;

use stream_core::trace::Trace;
use stream_core::{scope, Error as CoreError, Stream};

use crate::env::Env;
use crate::error::{Error, Result};
use crate::launch::{Ours, Raw, BATCH};
use crate::measurement::Measurement;
use crate::raw::{RawEvent, RawStream};
use crate::report::{Better, Report, Row, Source};
use crate::scope_cost::{per_op, raw_forks, OPS};

/// Runs case 14.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let cfg = env.cfg;
    let plan = cfg.plan(3, cfg.pick(300, 20));
    let mut off = Ours::new(env, 1)?;
    let mut on = Ours::new(env, 1)?.traced();
    let mut raw = Raw::new(env, 1)?;
    for (label, ours, target) in [
        ("untraced scope", &mut off, Some(1.03)),
        ("traced scope", &mut on, None),
    ] {
        let row = Measurement::new()
            .ours("ours", || ours.sample(BATCH, false))
            .raw("raw", || raw.sample(BATCH, false))
            .into_row(
                plan,
                Row::new(
                    "trace",
                    format!("launch enqueue, batches of {BATCH}, {label}"),
                    "ns/launch",
                    Better::Lower,
                ),
            )?;
        rep.push(match target {
            Some(t) => row.check_vs_raw(t, Source::Issue),
            None => row,
        });
    }
    off.check()?;
    on.check()?;
    raw.check()?;

    let plan = cfg.plan(2, cfg.pick(30, 5));
    let (a, b) = (&env.dev.new_stream()?, &env.dev.new_stream()?);
    let (ra, rb) = (RawStream::new()?, RawStream::new()?);
    let events = (RawEvent::new()?, RawEvent::new()?);
    for (label, traced, target) in [
        ("untraced scope", false, Some(1.03)),
        ("traced scope", true, None),
    ] {
        let row = Measurement::new()
            .ours("ours", || forks(a, b, traced))
            .raw("raw", || raw_forks((&events.0, &events.1), ra.0, rb.0))
            .into_row(
                plan,
                Row::new(
                    "trace",
                    format!(
                        "fork + join of an empty child, {label} (raw: event record/wait each way)"
                    ),
                    "ns",
                    Better::Lower,
                ),
            )?;
        rep.push(match target {
            Some(t) => row.check_vs_raw(t, Source::Issue),
            None => row,
        });
    }
    rep.note("trace: a traced sample records into a trace of its own, dropped after it (its events destroyed outside the timed loop)");
    Ok(())
}

/// `OPS` empty forks from a scope on `parent` to `child`, recording into a fresh trace
/// when `traced`: ns per fork and join.
fn forks(parent: &Stream, child: &Stream, traced: bool) -> Result<f64> {
    let trace = Trace::new();
    let mut ns = 0.0;
    scope(parent, |s| {
        if traced {
            s.trace_into(&trace)?;
        }
        let t = Instant::now();
        for _ in 0..OPS {
            s.fork(child, (), |_, ()| Ok::<_, CoreError>(()))?;
        }
        ns = per_op(t, OPS);
        Ok::<_, CoreError>(())
    })?;
    if traced && trace.len() != 4 * OPS {
        return Err(Error::msg(format!(
            "trace: {} slices recorded for {OPS} forks, not {}",
            trace.len(),
            4 * OPS
        )));
    }
    Ok(ns)
}
