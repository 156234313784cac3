//! The cost of one asynchronous operation: an empty `run_owned` round trip against an
//! empty scope, the `run_owned` call alone with 1,000 operations in flight, a whole
//! 1 MiB request's enqueue against the same work in a scope, and the head-of-line
//! effect of the completion thread.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use mini_executor::block_on;
use stream_core::{scope, Error as CoreError, Stream};

use crate::cuda::{self, work_config};
use crate::env::Env;
use crate::error::{Error, Result};
use crate::report::{Better, Report, Row};
use crate::sampling::{interleaved, Sampler};
use crate::sampling::{per_round_ratio, Rounds};

use super::client::{client_buffers, request_work, Client};

/// Operations per sample of the cost rows.
const OPS: usize = 1000;

/// The round trip of an empty operation, and the host time of enqueuing one.
pub(super) fn operation_cost(env: &Env, rep: &mut Report) -> Result<()> {
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
    let row = Row::new(
        "serve",
        "empty operation round trip: run_owned awaited (raw: empty scope, cuStreamSynchronize)",
        "ns",
        Better::Lower,
    )
    .figures(Some(round_trip.clone()), Some(scoped));
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
pub(super) fn head_of_line(env: &Env, rep: &mut Report, streams: &Arc<Vec<Stream>>) -> Result<()> {
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
        let row = Row::new(
            "serve",
            format!("head of line: empty run_owned on an idle stream 200 us after a long kernel's on another{label} (raw: empty scope)"),
            "ns",
            Better::Lower,
        )
        .figures(Some(ours), Some(scoped.clone()));
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
pub(super) fn request_enqueue_cost(env: &Env, rep: &mut Report) -> Result<()> {
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
    let row = Row::new(
        "serve",
        "1 MiB request: host time of the run_owned call (raw: the same work in a scope, before its synchronisation)",
        "ns",
        Better::Lower,
    )
    .figures(Some(ours), Some(scoped.clone()));
    rep.push(row);
    let row = Row::new(
        "serve",
        "1 MiB request: host time of the run_owned call, its future polled in a busy loop (raw: the same work in a scope)",
        "ns",
        Better::Lower,
    )
    .figures(Some(spun), Some(scoped));
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
