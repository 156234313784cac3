//! Case 9: an async server loop against the thread-per-stream design of the `threads`
//! example, at the same load, and the cost of one asynchronous operation (issue 17).
//!
//! **Server loop.** `CLIENTS` clients each send requests back to back; a request is
//! what case 5's is (upload of pinned memory, a short kernel, a download into pinned
//! memory, the reply). The load is the same for both designs: `CLIENTS` requests in
//! flight on `CLIENTS` streams.
//! * **threads** (the baseline, in the `raw` column): one OS thread and one stream per
//!   client, a scope per request (it blocks its thread until the reply has landed).
//! * **async** (`ours`): the clients are tasks of a tokio multi-threaded runtime with
//!   `CLIENTS / 8` worker threads; a request is one [`Stream::run_owned`] over the
//!   client's own pinned buffers, awaited.
//!
//! The request sizes are 64 KiB and 1 MiB, with device memory allocated per request
//! (stream-ordered, from the device's pool), and 1 MiB again with each client keeping
//! its two device buffers (attached instead of allocated): `cuMemAllocAsync` costs 0.6
//! to 50 µs of host time depending on the pool's state (see `request_steps`), which the
//! async design's two threads feel more than sixteen.
//!
//! Requests per second are measured over the whole batch, and each request's latency
//! (from its start to its reply) is kept: p50 and p99 are taken per round over every
//! request of that round's samples. Target (issue 17): async at least 0.95x the threads
//! design's requests/s, with 1/8 of its OS threads.
//!
//! **Cost per operation.** The round trip of an empty `run_owned` awaited with
//! `mini_executor::block_on`, the smallest executor, so that the row measures this
//! library rather than a runtime (context and capture checks, an event recorded and handed to the device's
//! completion thread, which sleeps in the event's blocking synchronisation and wakes the
//! waiting thread) against an empty scope (`cuStreamSynchronize` of an idle stream,
//! which spins), and the host time of the `run_owned` call alone (what an executor thread
//! spends to enqueue one), with 1,000 operations in flight; the host time of a whole
//! 1 MiB request's `run_owned` call against the same work in a scope; and the
//! head-of-line effect of the completion thread (an empty operation on an idle stream
//! made while the thread sleeps on a long kernel's operation of another stream).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use mini_executor::block_on;
use stream_core::{scope, DeviceVec, Error as CoreError, PinnedBuffer, Scope, Stream};
use tokio::runtime::Runtime;

use crate::cuda::{self, work_config, work_reference};
use crate::error::{Error, Result};
use crate::measure::{interleaved, Sampler, Stats};
use crate::report::{Better, Report, Row, Source};
use crate::rounds::{per_round_ratio, Rounds};
use crate::Env;

/// Concurrent clients (and streams) of the server loop.
const CLIENTS: usize = 16;
/// Worker threads of the async design: 1/8 of the threads design's.
const EXECUTOR_THREADS: usize = CLIENTS / 8;

/// The async design's worker threads: [`EXECUTOR_THREADS`], or `BENCH_SERVE_WORKERS`
/// for a diagnosis (how the loop scales with them).
fn executor_threads() -> usize {
    std::env::var("BENCH_SERVE_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(EXECUTOR_THREADS)
}
/// Kernel iterations per element, as in case 5.
const ITERS: u32 = 32;
/// Operations per sample of the cost rows.
const OPS: usize = 1000;

fn input(i: usize) -> f32 {
    (i % 1021) as f32 * 0.5 - 200.0
}

/// Runs case 8.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    if std::env::var_os("BENCH_SERVE_DIAG").is_some() {
        crate::request_steps::print(env)?;
        request_enqueue_cost(env, &mut Report::default())?;
    }
    let streams = (0..CLIENTS)
        .map(|_| env.dev.new_stream())
        .collect::<stream_core::Result<Vec<_>>>()?;
    let streams = Arc::new(streams);
    for (elems, keep, label) in [
        (1usize << 14, false, "64 KiB requests"),
        (1 << 18, false, "1 MiB requests"),
        (
            1 << 18,
            true,
            "1 MiB requests, device buffers kept per client",
        ),
    ] {
        server_loop(env, rep, &streams, elems, keep, label)?;
    }
    operation_cost(env, rep)?;
    if std::env::var_os("BENCH_SERVE_DIAG").is_some() {
        crate::request_steps::print(env)?;
    }
    request_enqueue_cost(env, rep)?;
    head_of_line(env, rep, &streams)?;
    if std::env::var_os("BENCH_SERVE_DIAG").is_some() {
        crate::request_steps::print(env)?;
    }
    rep.note(format!(
        "serve: the async design runs {} executor threads (a tokio multi-threaded runtime) plus stream_core's one completion thread (no doorbell thread: no stream has the head-of-line bypass on); the threads design runs {CLIENTS}",
        executor_threads()
    ));
    Ok(())
}

/// What one client owns between requests: its request and reply buffers (pinned), and,
/// in the loop that keeps them, the device buffers its requests use.
pub(crate) struct Client {
    pub(crate) input: PinnedBuffer<f32>,
    pub(crate) output: PinnedBuffer<f32>,
    kept: Option<(DeviceVec<f32>, DeviceVec<f32>)>,
}

/// Every request's latency and the host time its closure took to enqueue the work, in
/// seconds, one vector per sample taken (warm-up included).
type Latencies = RefCell<Vec<Vec<Timing>>>;

/// One request's times in seconds: from its start to its reply, and the closure's own
/// host time (upload, allocation, launch and download enqueued).
#[derive(Clone, Copy)]
struct Timing {
    latency: f64,
    enqueue: f64,
}

/// `CLIENTS` clients with requests of `elems` elements; with `keep_device_buffers`, each
/// also owns the device buffers of its requests.
pub(crate) fn client_buffers(
    env: &Env,
    elems: usize,
    keep_device_buffers: bool,
) -> Result<Vec<Client>> {
    (0..CLIENTS)
        .map(|_| {
            let mut input_buffer = env.dev.alloc_pinned::<f32>(elems)?;
            for (j, v) in input_buffer.iter_mut().enumerate() {
                *v = input(j);
            }
            let mut output = env.dev.alloc_pinned::<f32>(elems)?;
            output.fill(f32::NAN);
            let kept = match keep_device_buffers {
                true => Some((env.dev.alloc_vec(elems)?, env.dev.alloc_vec(elems)?)),
                false => None,
            };
            Ok(Client {
                input: input_buffer,
                output,
                kept,
            })
        })
        .collect()
}

/// One request's work, in both designs: the upload, the kernel and the download, into
/// device memory allocated for the request (stream-ordered) or into the client's own.
fn request_work<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    client: &'env mut Client,
) -> std::result::Result<(), CoreError> {
    let Client {
        input,
        output,
        kept,
    } = client;
    match kept {
        Some((x, y)) => {
            let mut x = s.attach(x)?;
            s.copy_to_device(&input[..], &mut x)?;
            let mut y = s.attach(y)?;
            cuda::work_f32(s, work_config(x.len()), ITERS, &x, &mut y)?;
            let _reply = s.copy_to_host(&y, &mut output[..])?;
        }
        None => {
            let x = s.upload(&input[..])?;
            let mut y = s.alloc::<f32>(x.len())?;
            cuda::work_f32(s, work_config(x.len()), ITERS, &x, &mut y)?;
            let _reply = s.copy_to_host(&y, &mut output[..])?;
        }
    }
    Ok(())
}

/// Checks every 997th element and the last of one reply.
fn check_reply(who: &str, out: &[f32]) -> Result<()> {
    for j in (0..out.len()).step_by(997).chain([out.len() - 1]) {
        let want = work_reference(input(j), ITERS);
        if out[j].to_bits() != want.to_bits() {
            return Err(Error::msg(format!(
                "{who}: reply element {j} is {} but the CPU computes {want}",
                out[j]
            )));
        }
    }
    Ok(())
}

fn server_loop(
    env: &Env,
    rep: &mut Report,
    streams: &Arc<Vec<Stream>>,
    elems: usize,
    keep_device_buffers: bool,
    label: &str,
) -> Result<()> {
    let per_client = env.cfg.pick(250, 20);
    let total = per_client * CLIENTS;
    let (warmup, reps) = env.cfg.pick((1, 3), (1, 2));
    let plan = env.cfg.plan(warmup, reps);
    let threads_state = RefCell::new(client_buffers(env, elems, keep_device_buffers)?);
    let async_state = RefCell::new(Some(client_buffers(env, elems, keep_device_buffers)?));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(executor_threads())
        .build()
        .map_err(|e| Error::msg(format!("serve: cannot start the tokio runtime: {e}")))?;
    let (threads_latency, async_latency): (Latencies, Latencies) = Default::default();
    let stats = {
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "async",
                Box::new(|| {
                    let clients = async_state
                        .borrow_mut()
                        .take()
                        .ok_or_else(|| Error::msg("async: the buffers were lost"))?;
                    let (seconds, clients, latencies) =
                        async_batch(&runtime, streams, clients, per_client)?;
                    check_reply("async", &clients[0].output)?;
                    *async_state.borrow_mut() = Some(clients);
                    async_latency.borrow_mut().push(latencies);
                    Ok(seconds)
                }),
            ),
            (
                "threads",
                Box::new(|| {
                    let mut clients = threads_state.borrow_mut();
                    let (seconds, latencies) = threads_batch(streams, &mut clients, per_client)?;
                    check_reply("threads", &clients[0].output)?;
                    threads_latency.borrow_mut().push(latencies);
                    Ok(seconds)
                }),
            ),
        ];
        interleaved(plan, &mut samplers)?
    };
    let rps: Vec<Rounds> = stats.iter().map(|s| s.map(|t| total as f64 / t)).collect();
    let [ours, threads]: [Rounds; 2] = rps
        .try_into()
        .map_err(|_| Error::msg("serve: expected two results"))?;
    let mut row = Row::new(
        "serve",
        format!(
            "{label}, {CLIENTS} clients: async on {} threads (raw: {CLIENTS} threads)",
            executor_threads()
        ),
        "requests/s",
        Better::Higher,
    );
    (row.ours, row.raw) = (Some(ours), Some(threads));
    rep.push(row.check_vs_raw(0.95, Source::Issue));
    let latency = |t: &Timing| t.latency;
    let enqueue = |t: &Timing| t.enqueue;
    for (quantile, name, of) in [
        (0.5, "p50 latency", &latency as &dyn Fn(&Timing) -> f64),
        (0.99, "p99 latency", &latency),
        (0.5, "p50 host time of the request's closure", &enqueue),
    ] {
        let per_round = |latencies: &Latencies| -> Result<Rounds> {
            let samples = latencies.borrow();
            let rounds = samples[plan.warmup..]
                .chunks(plan.samples)
                .map(|round| {
                    let values = round.iter().flatten().map(of).collect();
                    Stats::new(vec![percentile(values, quantile) * 1e6])
                })
                .collect::<Result<Vec<_>>>()?;
            Rounds::new(rounds)
        };
        let mut row = Row::new(
            "serve",
            format!("{label}: {name} (raw: threads)"),
            "us",
            Better::Lower,
        );
        (row.ours, row.raw) = (
            Some(per_round(&async_latency)?),
            Some(per_round(&threads_latency)?),
        );
        rep.push(row);
    }
    Ok(())
}

/// The `quantile` (0..=1) of `values` (nearest rank); NaN when empty.
fn percentile(mut values: Vec<f64>, quantile: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 * quantile).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// One request of the async design: the client goes into the future and comes back
/// with the reply, and the closure's host time.
async fn async_request(
    stream: &Stream,
    client: Client,
) -> std::result::Result<(Client, f64), CoreError> {
    stream.run_owned(client, timed_request_work).await
}

/// [`request_work`], and the host seconds it took.
fn timed_request_work<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    client: &'env mut Client,
) -> std::result::Result<f64, CoreError> {
    let t = Instant::now();
    request_work(s, client)?;
    Ok(t.elapsed().as_secs_f64())
}

/// `per_client` requests from each client, all clients at once, on the runtime.
fn async_batch(
    runtime: &Runtime,
    streams: &Arc<Vec<Stream>>,
    clients: Vec<Client>,
    per_client: usize,
) -> Result<(f64, Vec<Client>, Vec<Timing>)> {
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            let streams = Arc::clone(streams);
            runtime.spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let t = Instant::now();
                    let enqueue;
                    (client, enqueue) = async_request(&streams[c], client).await?;
                    latencies.push(Timing {
                        latency: t.elapsed().as_secs_f64(),
                        enqueue,
                    });
                }
                Ok::<_, CoreError>((client, latencies))
            })
        })
        .collect();
    let mut clients = Vec::with_capacity(CLIENTS);
    let mut latencies = Vec::with_capacity(CLIENTS * per_client);
    for task in tasks {
        let (client, l) = runtime
            .block_on(task)
            .map_err(|e| Error::msg(format!("async: a client task failed: {e}")))??;
        clients.push(client);
        latencies.extend(l);
    }
    Ok((start.elapsed().as_secs_f64(), clients, latencies))
}

/// `per_client` requests from each client, a thread and a stream per client, a scope
/// per request.
fn threads_batch(
    streams: &[Stream],
    clients: &mut [Client],
    per_client: usize,
) -> Result<(f64, Vec<Timing>)> {
    let start = Instant::now();
    let latencies = std::thread::scope(|t| {
        let workers: Vec<_> = streams
            .iter()
            .zip(clients.iter_mut())
            .map(|(stream, client)| {
                t.spawn(move || {
                    let mut latencies = Vec::with_capacity(per_client);
                    for _ in 0..per_client {
                        let t = Instant::now();
                        let enqueue = scope(stream, |s| timed_request_work(s, client))?;
                        latencies.push(Timing {
                            latency: t.elapsed().as_secs_f64(),
                            enqueue,
                        });
                    }
                    Ok::<_, CoreError>(latencies)
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            let l = w
                .join()
                .map_err(|_| Error::msg("threads: a worker thread panicked"))??;
            all.extend(l);
        }
        Ok::<_, Error>(all)
    })?;
    Ok((start.elapsed().as_secs_f64(), latencies))
}

/// The round trip of an empty operation, and the host time of enqueuing one.
fn operation_cost(env: &Env, rep: &mut Report) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((2, 20), (1, 5));
    let plan = env.cfg.plan(warmup, reps);
    let stream = &env.streams[0];
    let per_op = |t: Instant| t.elapsed().as_nanos() as f64 / OPS as f64;
    let stats = {
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "run_owned round trip",
                Box::new(|| {
                    let t = Instant::now();
                    for _ in 0..OPS {
                        block_on(stream.run_owned((), |_, ()| Ok::<_, CoreError>(())))?;
                    }
                    Ok(per_op(t))
                }),
            ),
            (
                "scope round trip",
                Box::new(|| {
                    let t = Instant::now();
                    for _ in 0..OPS {
                        scope(stream, |_| Ok::<_, CoreError>(()))?;
                    }
                    Ok(per_op(t))
                }),
            ),
            (
                "run_owned enqueue",
                Box::new(|| {
                    let t = Instant::now();
                    let futures: Vec<_> = (0..OPS)
                        .map(|_| stream.run_owned((), |_, ()| Ok::<_, CoreError>(())))
                        .collect();
                    let ns = per_op(t);
                    for f in futures {
                        block_on(f)?;
                    }
                    Ok(ns)
                }),
            ),
        ];
        interleaved(plan, &mut samplers)?
    };
    let [round_trip, scoped, enqueue]: [Rounds; 3] = stats
        .try_into()
        .map_err(|_| Error::msg("serve: expected three cost results"))?;
    let mut row = Row::new(
        "serve",
        "empty operation round trip: run_owned awaited (raw: empty scope, cuStreamSynchronize)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw) = (Some(round_trip.clone()), Some(scoped));
    rep.push(row);
    let mut row = Row::new(
        "serve",
        format!("run_owned enqueue host time, {OPS} in flight"),
        "ns",
        Better::Lower,
    );
    row.ours = Some(enqueue.clone());
    rep.push(row);
    if let Some(ratio) = per_round_ratio(&enqueue.figures(), &round_trip.figures()) {
        rep.figure_per_round("serve", "enqueue host time / round trip", ratio, "x");
    }
    Ok(())
}

/// Kernel iterations of the long kernel of [`head_of_line`] (about a millisecond over
/// `HOL_ELEMS` elements on an H100).
const HOL_ITERS: u32 = 20_000;
/// Elements of that kernel.
const HOL_ELEMS: usize = 1 << 20;
/// Operations per sample of [`head_of_line`].
const HOL_OPS: usize = 20;
/// How long [`head_of_line`] waits after enqueuing the long kernel, so that the
/// completion thread is asleep on it when the empty operation comes.
const HOL_SETTLE: std::time::Duration = std::time::Duration::from_micros(200);

/// The head-of-line effect of the completion thread: the round trip of an empty
/// `run_owned` on an idle stream, made [`HOL_SETTLE`] after a long kernel's `run_owned`
/// on another stream (the completion thread sleeps on the oldest operation, the long
/// one, so the empty one is noticed when the long one ends), and the same on a stream
/// with the head-of-line bypass on (the empty one rings the doorbell, whose thread
/// finishes it), against an empty scope on the idle stream in the same situation; and
/// the long kernel's own round trip.
fn head_of_line(env: &Env, rep: &mut Report, streams: &Arc<Vec<Stream>>) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((1, 5), (1, 2));
    let plan = env.cfg.plan(warmup, reps);
    let (idle, busy, bypass) = (&streams[0], &streams[1], &streams[2]);
    bypass.set_head_of_line_bypass(true);
    let input = env.dev.upload_vec(&vec![1.0f32; HOL_ELEMS])?;
    let input = Arc::new(input);
    let long = || {
        let input = Arc::clone(&input);
        busy.run_owned(input, |s, input| {
            let x = s.attach_ref(&**input)?;
            let mut y = s.alloc::<f32>(HOL_ELEMS)?;
            cuda::work_f32(s, work_config(HOL_ELEMS), HOL_ITERS, &x, &mut y)?;
            Ok::<_, CoreError>(())
        })
    };
    let per_op = |ns: f64| ns / HOL_OPS as f64;
    // ns of `empty_op`, each made `HOL_SETTLE` after a long kernel's `run_owned`.
    let behind_long = |empty_op: &dyn Fn() -> Result<()>| -> Result<f64> {
        let mut ns = 0.0;
        for _ in 0..HOL_OPS {
            let behind = long();
            std::thread::sleep(HOL_SETTLE);
            let t = Instant::now();
            empty_op()?;
            ns += t.elapsed().as_nanos() as f64;
            block_on(behind)?;
        }
        Ok(per_op(ns))
    };
    // ns of an empty `run_owned` on `stream`, awaited, behind a long kernel.
    let empty_run_owned_behind_long = |stream: &Stream| {
        behind_long(&|| {
            block_on(stream.run_owned((), |_, ()| Ok::<_, CoreError>(())))?;
            Ok(())
        })
    };
    let stats = {
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "run_owned behind a long kernel",
                Box::new(|| empty_run_owned_behind_long(idle)),
            ),
            (
                "run_owned with the bypass behind a long kernel",
                Box::new(|| empty_run_owned_behind_long(bypass)),
            ),
            (
                "scope behind a long kernel",
                Box::new(|| {
                    behind_long(&|| {
                        scope(idle, |_| Ok::<_, CoreError>(()))?;
                        Ok(())
                    })
                }),
            ),
            (
                "long kernel round trip",
                Box::new(|| {
                    let t = Instant::now();
                    for _ in 0..HOL_OPS {
                        block_on(long())?;
                    }
                    Ok(per_op(t.elapsed().as_nanos() as f64))
                }),
            ),
        ];
        interleaved(plan, &mut samplers)?
    };
    bypass.set_head_of_line_bypass(false);
    let [behind, bypassed, scoped, long_trip]: [Rounds; 4] = stats
        .try_into()
        .map_err(|_| Error::msg("serve: expected four head-of-line results"))?;
    for (label, ours) in [("", behind), (", head-of-line bypass on", bypassed)] {
        let mut row = Row::new(
            "serve",
            format!("head of line: empty run_owned on an idle stream 200 us after a long kernel's on another{label} (raw: empty scope)"),
            "ns",
            Better::Lower,
        );
        (row.ours, row.raw) = (Some(ours), Some(scoped.clone()));
        rep.push(row);
    }
    let mut row = Row::new(
        "serve",
        "head of line: the long kernel's run_owned round trip",
        "ns",
        Better::Lower,
    );
    row.ours = Some(long_trip);
    rep.push(row);
    Ok(())
}

/// Requests per sample of [`request_enqueue_cost`].
const ENQUEUE_REQUESTS: usize = 200;

/// The host time an executor thread spends on one 1 MiB request of the server loop: the
/// `run_owned` call (context and capture checks, the closure's upload, allocation,
/// kernel and download, the scope's frees, the event and the hand-over) on an idle
/// stream, against the same closure's work in a scope up to (not including) its
/// synchronisation. The executor threads' share of the async design's time is this
/// figure times the requests per second, over their number.
///
/// `block_on` puts its thread to sleep until the completion thread wakes it, while a
/// scope's `cuStreamSynchronize` spins; so the `run_owned` call is also timed with its
/// future polled in a busy loop, which keeps the thread as warm as the scope's: the
/// difference between the two `run_owned` rows is what waking from sleep costs the next
/// call, not the library.
fn request_enqueue_cost(env: &Env, rep: &mut Report) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((1, 5), (1, 2));
    let plan = env.cfg.plan(warmup, reps);
    let stream = &env.streams[0];
    let elems = 1 << 18;
    let mut clients = client_buffers(env, elems, false)?;
    let ours_client = RefCell::new(clients.pop());
    let spun_client = RefCell::new(clients.pop());
    let scope_client = RefCell::new(clients.pop());
    let per_request = |ns: f64| ns / ENQUEUE_REQUESTS as f64;
    // Every request's host time, and the copies staged meanwhile, for BENCH_SERVE_DIAG.
    let staged_before = stream_core::staging::staged_copy_counts();
    let (ours_each, scope_each) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
    let stats = {
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "run_owned request enqueue",
                Box::new(|| {
                    run_owned_requests(stream, &ours_client, Await::BlockOn, Some(&ours_each))
                        .map(per_request)
                }),
            ),
            (
                "run_owned request enqueue, awaited by spinning",
                Box::new(|| {
                    run_owned_requests(stream, &spun_client, Await::Spin, None).map(per_request)
                }),
            ),
            (
                "scope request enqueue",
                Box::new(|| {
                    let mut ns = 0.0;
                    let mut guard = scope_client.borrow_mut();
                    let client = guard
                        .as_mut()
                        .ok_or_else(|| Error::msg("enqueue cost: the buffers were lost"))?;
                    for _ in 0..ENQUEUE_REQUESTS {
                        scope(stream, |s| {
                            let t = Instant::now();
                            request_work(s, &mut *client)?;
                            let elapsed = t.elapsed().as_nanos() as f64;
                            ns += elapsed;
                            scope_each.borrow_mut().push(elapsed);
                            Ok::<_, CoreError>(())
                        })?;
                    }
                    Ok(per_request(ns))
                }),
            ),
        ];
        interleaved(plan, &mut samplers)?
    };
    let [ours, spun, scoped]: [Rounds; 3] = stats
        .try_into()
        .map_err(|_| Error::msg("serve: expected three enqueue results"))?;
    if std::env::var_os("BENCH_SERVE_DIAG").is_some() {
        let staged_after = stream_core::staging::staged_copy_counts();
        println!(
            "  serve diag: 1 MiB request enqueue: staged (uploads, downloads) before {staged_before:?}, after {staged_after:?}"
        );
        for (name, each) in [("run_owned", ours_each), ("scope", scope_each)] {
            let mut each = each.into_inner();
            each.sort_by(f64::total_cmp);
            let mean = each.iter().sum::<f64>() / each.len().max(1) as f64;
            let at = |q: f64| each[((each.len() - 1) as f64 * q) as usize];
            println!(
                "  serve diag: 1 MiB request enqueue, {name}: {} requests, ns median {:.0} mean {mean:.0} p90 {:.0} p99 {:.0} max {:.0}",
                each.len(),
                at(0.5),
                at(0.9),
                at(0.99),
                at(1.0)
            );
        }
    }
    let mut row = Row::new(
        "serve",
        "1 MiB request: host time of the run_owned call (raw: the same work in a scope, before its synchronisation)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw) = (Some(ours), Some(scoped.clone()));
    rep.push(row);
    let mut row = Row::new(
        "serve",
        "1 MiB request: host time of the run_owned call, its future polled in a busy loop (raw: the same work in a scope)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw) = (Some(spun), Some(scoped));
    rep.push(row);
    Ok(())
}

/// How [`run_owned_requests`] waits for each request before the next.
#[derive(Clone, Copy)]
enum Await {
    /// `mini_executor::block_on`: the thread sleeps until the completion thread wakes it.
    BlockOn,
    /// [`spin_on`]: the thread stays busy.
    Spin,
}

/// [`ENQUEUE_REQUESTS`] 1 MiB requests through `run_owned`, one after the other, over
/// the client in `client` (taken and put back); returns the total host nanoseconds of
/// the `run_owned` calls alone, and notes each call's in `each`.
fn run_owned_requests(
    stream: &Stream,
    client: &RefCell<Option<Client>>,
    wait: Await,
    each: Option<&RefCell<Vec<f64>>>,
) -> Result<f64> {
    let mut ns = 0.0;
    for _ in 0..ENQUEUE_REQUESTS {
        let taken = client
            .borrow_mut()
            .take()
            .ok_or_else(|| Error::msg("enqueue cost: the buffers were lost"))?;
        let t = Instant::now();
        let future = stream.run_owned(taken, request_work);
        let elapsed = t.elapsed().as_nanos() as f64;
        ns += elapsed;
        if let Some(each) = each {
            each.borrow_mut().push(elapsed);
        }
        let (back, ()) = match wait {
            Await::BlockOn => block_on(future)?,
            Await::Spin => spin_on(future)?,
        };
        *client.borrow_mut() = Some(back);
    }
    Ok(ns)
}

/// Polls `future` in a busy loop until it is ready: the thread never sleeps (only for
/// the measurement above; an executor would sleep).
fn spin_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::hint::spin_loop();
    }
}
