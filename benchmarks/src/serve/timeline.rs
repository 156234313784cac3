//! `BENCH_SERVE_TIMELINE=1`: where a 1 MiB request's latency goes in the server loop,
//! the threads design against the async one (its completion thread sleeping, then
//! polling), printed only, at the end of case `serve`.
//!
//! Every request of the timed clients (all of them, then one while the other fifteen
//! run untimed: timing events slow the GPU's interleaving of the streams, and with all
//! clients timed both designs run at the same, lower rate) records a timing event on its
//! stream before its work and one after it; once a batch is over, their times on the GPU's clock are put on the host's (an
//! event recorded and waited for just before the batch is the common origin). Per
//! request that gives: the host time of its enqueue; its GPU span (from the first event
//! to the second: its work, including the wait for copy engines that other streams'
//! requests use); the time from the second event to the reply being back in the
//! client's hands (the threads design: its `cuStreamSynchronize` returning; the async
//! one: the completion thread noticing, waking the task, the executor running it); and
//! how busy the GPU was (the share of the batch during which at least one request was
//! between its events, and how many were on average). A loop whose GPU is as busy as the
//! other's but whose requests wait longer for their reply loses in the hand-back; one
//! whose GPU idles loses before the work reaches it.
//!
//! It runs on streams of its own: taking a stream's handle (`interop::raw_stream`)
//! makes later scopes on it ask the driver about captures, which the measured loops'
//! streams must not pay.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys};
use stream_core::future::{set_completion_mode, CompletionMode};
use stream_core::interop::{bind, raw_stream};
use stream_core::{scope, Scope, Stream};

use super::client::{client_buffers, request_work, Client, CLIENTS};
use crate::env::Env;
use crate::error::{Context, Error, Result};

/// Requests per client in each design's batch.
const PER_CLIENT: usize = 100;
/// Elements of a request: 1 MiB of `f32`.
const ELEMS: usize = 1 << 18;

/// A timing event of the library's context (the device's primary context), destroyed on
/// drop.
struct TimingEvent(sys::CUevent);

// SAFETY: an event handle may be recorded, queried and destroyed from any thread.
unsafe impl Send for TimingEvent {}
// SAFETY: see `Send`; `&TimingEvent` only hands out the handle.
unsafe impl Sync for TimingEvent {}

impl TimingEvent {
    /// Made with the device's context bound by the caller.
    fn new() -> Result<Self> {
        let event =
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).context("cuEventCreate")?;
        Ok(TimingEvent(event))
    }

    /// Milliseconds from `origin`'s completion to this event's (both completed).
    fn since(&self, origin: &TimingEvent) -> Result<f64> {
        // SAFETY: both are live events of one context, recorded and completed.
        let ms =
            unsafe { result::event::elapsed(origin.0, self.0) }.context("cuEventElapsedTime")?;
        Ok(f64::from(ms))
    }
}

impl Drop for TimingEvent {
    fn drop(&mut self) {
        // SAFETY: made in `new`, destroyed once; every batch has ended before the events
        // are dropped (the driver defers the release of a pending event anyway).
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// The events recorded before and after one request's work, for a timed client.
type Timed = Option<(Arc<TimingEvent>, Arc<TimingEvent>)>;

/// A client and the events of its current request: what a request owns.
struct Job {
    client: Client,
    timed: Timed,
    /// When the request's closure returned (its work enqueued).
    enqueued: Option<Instant>,
}

/// One request's host times and events.
struct Stamp {
    start: Instant,
    enqueued: Instant,
    replied: Instant,
    timed: Timed,
}

/// The request's work between its two events.
fn stamped_work<'s, 'env>(s: &'s Scope<'s, 'env>, job: &'env mut Job) -> Result<()> {
    let Some((before, after)) = &job.timed else {
        request_work(s, &mut job.client)?;
        job.enqueued = Some(Instant::now());
        return Ok(());
    };
    let stream = raw_stream(s);
    // SAFETY: a live event and the scope's live stream, of one context (bound by the
    // scope); recording is ordered in the stream like any of its work.
    unsafe { result::event::record(before.0, stream) }.context("cuEventRecord")?;
    request_work(s, &mut job.client)?;
    // SAFETY: as above.
    unsafe { result::event::record(after.0, stream) }.context("cuEventRecord")?;
    job.enqueued = Some(Instant::now());
    Ok(())
}

/// Prints the timeline of each design.
pub fn print(env: &Env) -> Result<()> {
    let streams = Arc::new(
        (0..CLIENTS)
            .map(|_| env.dev.new_stream())
            .collect::<stream_core::Result<Vec<_>>>()?,
    );
    let designs = [
        None,
        Some(CompletionMode::Sleep),
        Some(CompletionMode::Poll),
    ];
    for (probes, mode) in [CLIENTS, 1]
        .into_iter()
        .flat_map(|p| designs.map(|d| (p, d)))
    {
        let (origin, events) = {
            let _bound = bind(&env.dev)?;
            let events = (0..probes * PER_CLIENT * 2)
                .map(|_| TimingEvent::new().map(Arc::new))
                .collect::<Result<Vec<_>>>()?;
            (TimingEvent::new()?, events)
        };
        let clients = client_buffers(env, ELEMS, false)?;
        let origin_at = record_origin(&streams[0], &origin)?;
        let t = Instant::now();
        let stamps = match mode {
            None => threads_batch(&streams, clients, &events, probes)?,
            Some(mode) => {
                set_completion_mode(&env.dev, mode)?;
                let stamps = async_batch(&streams, clients, &events, probes);
                set_completion_mode(&env.dev, CompletionMode::Sleep)?;
                stamps?
            }
        };
        let seconds = t.elapsed().as_secs_f64();
        let design = match mode {
            None => "threads (16)",
            Some(CompletionMode::Sleep) => "async, completion sleeping",
            Some(_) => "async, completion polling",
        };
        report(design, probes, seconds, &stamps, &origin, origin_at)?;
    }
    Ok(())
}

/// Records `origin` on `stream`, waits for it, and returns the host's time just after.
fn record_origin(stream: &Stream, origin: &TimingEvent) -> Result<Instant> {
    scope(stream, |s| {
        // SAFETY: a live event and the scope's live stream, of one context.
        unsafe { result::event::record(origin.0, raw_stream(s)) }.context("cuEventRecord")
    })?;
    // SAFETY: a live event, recorded above.
    unsafe { result::event::synchronize(origin.0) }.context("cuEventSynchronize")?;
    Ok(Instant::now())
}

/// The events of request `r` of client `c`, when it is one of the `probes` timed ones.
fn events_of(events: &[Arc<TimingEvent>], probes: usize, c: usize, r: usize) -> Timed {
    let at = (c * PER_CLIENT + r) * 2;
    (c < probes).then(|| (Arc::clone(&events[at]), Arc::clone(&events[at + 1])))
}

/// The threads design: a thread and a stream per client, a scope per request.
fn threads_batch(
    streams: &[Stream],
    clients: Vec<Client>,
    events: &[Arc<TimingEvent>],
    probes: usize,
) -> Result<Vec<Stamp>> {
    std::thread::scope(|t| {
        let workers: Vec<_> = streams
            .iter()
            .zip(clients)
            .enumerate()
            .map(|(c, (stream, client))| {
                t.spawn(move || {
                    let mut job = Job {
                        client,
                        timed: None,
                        enqueued: None,
                    };
                    let mut stamps = Vec::with_capacity(PER_CLIENT);
                    for r in 0..PER_CLIENT {
                        job.timed = events_of(events, probes, c, r);
                        let start = Instant::now();
                        scope(stream, |s| stamped_work(s, &mut job))?;
                        stamps.push(stamp(start, &job)?);
                    }
                    Ok::<_, Error>(stamps)
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            all.extend(
                w.join()
                    .map_err(|_| Error::msg("timeline: a client thread panicked"))??,
            );
        }
        Ok(all)
    })
}

/// The async design: the clients are tasks of the serve case's runtime shape, a request
/// is one `run_owned`.
fn async_batch(
    streams: &Arc<Vec<Stream>>,
    clients: Vec<Client>,
    events: &[Arc<TimingEvent>],
    probes: usize,
) -> Result<Vec<Stamp>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(super::executor_threads())
        .build()
        .map_err(|e| Error::msg(format!("timeline: cannot start the tokio runtime: {e}")))?;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            let streams = Arc::clone(streams);
            let mine: Vec<_> = (0..PER_CLIENT)
                .map(|r| events_of(events, probes, c, r))
                .collect();
            runtime.spawn(async move {
                let mut job = Job {
                    client,
                    timed: None,
                    enqueued: None,
                };
                let mut stamps = Vec::with_capacity(PER_CLIENT);
                for timed in mine {
                    job.timed = timed;
                    let start = Instant::now();
                    (job, ()) = streams[c].run_owned(job, stamped_work).await?;
                    stamps.push(stamp(start, &job)?);
                }
                Ok::<_, Error>(stamps)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(
            runtime
                .block_on(task)
                .map_err(|e| Error::msg(format!("timeline: a client task failed: {e}")))??,
        );
    }
    Ok(all)
}

/// The stamp of the request `job` just finished, replied now.
fn stamp(start: Instant, job: &Job) -> Result<Stamp> {
    let replied = Instant::now();
    Ok(Stamp {
        start,
        enqueued: job
            .enqueued
            .ok_or_else(|| Error::msg("timeline: a request did not enqueue"))?,
        replied,
        timed: job.timed.clone(),
    })
}

/// Prints one design's line: throughput over every request, the rest over the timed
/// ones (every client's, or one client's while the others run untimed).
fn report(
    design: &str,
    probes: usize,
    seconds: f64,
    stamps: &[Stamp],
    origin: &TimingEvent,
    origin_at: Instant,
) -> Result<()> {
    // Seconds since `origin_at`, host and GPU alike.
    let host = |t: Instant| t.duration_since(origin_at).as_secs_f64();
    let mut spans = Vec::with_capacity(stamps.len());
    let (mut enqueue, mut gpu, mut reply, mut latency) = (vec![], vec![], vec![], vec![]);
    for s in stamps {
        let Some((before, after)) = &s.timed else {
            continue;
        };
        let (before, after) = (before.since(origin)? / 1e3, after.since(origin)? / 1e3);
        spans.push((before, after));
        enqueue.push(host(s.enqueued) - host(s.start));
        gpu.push(after - before);
        reply.push(host(s.replied) - after);
        latency.push(host(s.replied) - host(s.start));
    }
    if spans.is_empty() {
        return Err(Error::msg("timeline: no request was timed"));
    }
    let us = |v: Vec<f64>| {
        let at = |q: f64| super::percentile(v.clone(), q) * 1e6;
        format!("{:.1} ({:.1})", at(0.5), at(0.9))
    };
    let occupancy = match probes == CLIENTS {
        true => {
            let window = (
                stamps
                    .iter()
                    .map(|s| host(s.start))
                    .fold(f64::INFINITY, f64::min),
                stamps.iter().map(|s| host(s.replied)).fold(0.0, f64::max),
            );
            let (busy, depth) = occupancy(&mut spans, window);
            format!(
                "; GPU busy {:.1}% of the batch, {depth:.2} requests in their GPU span on average",
                busy * 100.0
            )
        }
        false => String::new(),
    };
    println!(
        "  serve timeline, 1 MiB, {design}, {probes} of {CLIENTS} clients timed: {:.0} requests/s; per timed request, median (p90) us: enqueue {}, GPU span {}, GPU end to reply {}, latency {}{occupancy}",
        stamps.len() as f64 / seconds,
        us(enqueue),
        us(gpu),
        us(reply),
        us(latency),
    );
    Ok(())
}

/// The share of `window` (host seconds) covered by at least one span, and the spans'
/// total length over the window.
fn occupancy(spans: &mut [(f64, f64)], (from, to): (f64, f64)) -> (f64, f64) {
    let length = (to - from).max(f64::MIN_POSITIVE);
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut covered, mut reach) = (0.0, f64::NEG_INFINITY);
    for &(start, end) in spans.iter() {
        let start = start.max(reach);
        if end > start {
            covered += end - start;
            reach = end;
        }
    }
    let total: f64 = spans.iter().map(|(s, e)| e - s).sum();
    (covered / length, total / length)
}

#[cfg(test)]
mod tests {
    use super::occupancy;

    #[test]
    fn occupancy_counts_overlaps_once_and_the_depth_in_full() {
        let mut spans = [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)];
        let (busy, depth) = occupancy(&mut spans, (0.0, 10.0));
        assert!((busy - 0.4).abs() < 1e-12, "{busy}");
        assert!((depth - 0.5).abs() < 1e-12, "{depth}");
    }
}
