//! The trace recorder on a real GPU (`stream-core/src/trace/`): a traced scope and its
//! forks record every operation (and a staged copy's chunks) on its stream's track with
//! GPU times that respect the streams' order, arrows for each fork and join, overlapping work overlaps in the
//! trace; untraced scopes record nothing; writing before the work completes is an error,
//! never a wait; and Perfetto's trace processor reads the same operations back (only
//! with `STREAM_CORE_PERFETTO=1`, where it can run: see `main`).
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::collections::HashMap;

use gpu_tests::chrome_trace::{named, parse, Slice};
use gpu_tests::{
    check_error, device, ensure, expect_err, gpu_status, spin, tests, GpuStatus, Test, TestResult,
};
use serde_json::Value;
use stream_core::nccl::{Communicator, Sum, UniqueId};
use stream_core::trace::Trace;
use stream_core::{scope, Device, Error};

/// Set where Perfetto's trace processor can run: registers
/// [`perfetto_reads_the_same_operations`].
const PERFETTO_ENV: &str = "STREAM_CORE_PERFETTO";

fn main() {
    let mut gpu: Vec<Test> = tests![
        a_traced_scope_and_its_fork_record_each_operation_in_stream_order,
        work_that_overlaps_on_the_gpu_overlaps_in_the_trace,
        untraced_scopes_and_work_before_trace_into_record_nothing,
        a_collective_is_one_slice_with_its_bytes,
        a_graph_replay_is_one_slice,
        scopes_on_several_threads_record_into_one_trace,
        writing_a_trace_before_its_work_completes_is_an_error_not_a_wait,
        a_scope_records_into_one_trace,
    ];
    // Perfetto's trace processor is a binary that PyPI's `perfetto` package downloads
    // at first use: where it can run, say so, and the check runs (and fails if it
    // cannot); elsewhere it is not registered, rather than passing without checking.
    if std::env::var_os(PERFETTO_ENV).is_some() {
        gpu.extend(tests![perfetto_reads_the_same_operations]);
    } else if !matches!(gpu_status(), GpuStatus::Absent(_)) {
        eprintln!(
            "test_trace: perfetto_reads_the_same_operations is not registered: set \
             {PERFETTO_ENV}=1 where `python3 -c \"from perfetto.trace_processor import \
             TraceProcessor\"` can start a trace processor (it downloads its binary at first \
             use)"
        );
    }
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => {
            gpu.extend(tests![
                a_fork_onto_another_gpu_records_on_that_gpu_s_process
            ]);
        }
        GpuStatus::Present(n) => eprintln!(
            "test_trace: {n} CUDA device(s): the two-GPU test is not registered (run this \
             binary on a machine with two GPUs to cover a traced fork across devices)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(&gpu, &[])
}

/// About 25 ms of spinning on an H100/H200.
const UNIT: u64 = 50_000_000;

/// Upload, fill and a kernel on the parent's stream; a fork onto a second stream that
/// copies the lent buffer and downloads the copy. Each operation is one slice of its
/// category on its stream's track, with its bytes; the child's slices lie between the
/// fork's arrow and the join's; each arrow starts no later than it ends; and on each
/// track the slices follow each other in the order they were enqueued.
fn a_traced_scope_and_its_fork_record_each_operation_in_stream_order() -> TestResult {
    let dev = device()?;
    let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    let trace = Trace::new();
    let input: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
    let mut out = vec![0f32; input.len()];
    scope(&a, |s| -> TestResult {
        s.trace_into(&trace)?;
        let mut x = s.upload(&input)?;
        s.fill(&mut x, 2.0)?;
        spin(s, UNIT / 10)?;
        s.fork(&b, &x, |c, x| {
            let mut y = c.alloc::<f32>(x.len())?;
            c.copy_device(&x, &mut y)?;
            let _landed = c.copy_to_host(&y, &mut out)?;
            Ok::<_, Error>(())
        })?;
        Ok(())
    })?;
    ensure!(
        out.iter().all(|&v| v == 2.0),
        "the traced work computed wrongly"
    );
    let p = parse(&trace)?;
    ensure!(p.lost == 0 && trace.lost() == 0, "{} records lost", p.lost);
    ensure!(p.tracks == 2, "{} tracks for two streams", p.tracks);
    let count = |cat: &str| p.slices.iter().filter(|s| s.cat == cat).count();
    let counts = [
        count("copy"),
        count("fill"),
        count("kernel"),
        count("fork"),
        count("join"),
    ];
    ensure!(
        counts == [3, 1, 1, 2, 2],
        "copy, fill, kernel, fork, join slices: {counts:?}: {:#?}",
        p.slices
    );
    ensure!(
        trace.len() == p.slices.len(),
        "len {} for {} slices",
        trace.len(),
        p.slices.len()
    );
    let bytes = (input.len() * 4) as u64;
    for name in ["copy_to_device", "copy_device", "copy_to_host"] {
        let s = named(&p, name);
        ensure!(
            s.len() == 1 && s[0].bytes == Some(bytes) && s[0].dur > 0.0,
            "{name}: {s:?}"
        );
    }
    // The pageable upload is staged: its chunks' DMAs lie inside its slice and add up
    // to its bytes (the download returns at once: its copy-out is not on this stream).
    let upload = named(&p, "copy_to_device")[0];
    let chunks = named(&p, "staged upload chunk");
    ensure!(
        !chunks.is_empty()
            && chunks.iter().all(|c| c.cat == "staged"
                && c.tid == upload.tid
                && c.ts >= upload.ts - 1.0
                && c.ts + c.dur <= upload.ts + upload.dur + 1.0)
            && chunks.iter().filter_map(|c| c.bytes).sum::<u64>() == bytes,
        "staged chunks {chunks:#?} of the upload {upload:?}"
    );
    let parent = upload.tid;
    let child = named(&p, "copy_device")[0].tid;
    ensure!(parent != child, "parent and child on one track");
    ensure!(
        named(&p, "spin_then_write_u32")
            .iter()
            .all(|k| k.tid == parent && k.dur > 0.0),
        "kernel slices: {:?}",
        named(&p, "spin_then_write_u32")
    );
    // Arrows: a fork from the parent to the child, a join back; each start <= its end.
    let mut arrows: HashMap<u64, Vec<(String, u64, f64)>> = HashMap::new();
    for (phase, id, tid, ts) in &p.flows {
        arrows
            .entry(*id)
            .or_default()
            .push((phase.clone(), *tid, *ts));
    }
    ensure!(arrows.len() == 2, "arrows: {arrows:?}");
    for ends in arrows.values() {
        ensure!(
            ends.len() == 2 && ends[0].0 == "s" && ends[1].0 == "f" && ends[0].2 <= ends[1].2,
            "an arrow's ends: {ends:?}"
        );
    }
    let fork_at = p
        .flows
        .iter()
        .find(|f| f.0 == "f" && f.2 == child)
        .ok_or("no fork arrow into the child")?
        .3;
    let join_at = p
        .flows
        .iter()
        .find(|f| f.0 == "f" && f.2 == parent)
        .ok_or("no join arrow into the parent")?
        .3;
    for s in p
        .slices
        .iter()
        .filter(|s| s.tid == child && s.cat == "copy")
    {
        ensure!(
            s.ts >= fork_at && s.ts + s.dur <= join_at,
            "child slice {s:?} outside the fork ({fork_at}) .. join ({join_at})"
        );
    }
    let kernel_end = named(&p, "spin_then_write_u32")
        .iter()
        .map(|k| k.ts + k.dur)
        .fold(0.0, f64::max);
    ensure!(
        fork_at >= kernel_end - 1.0,
        "the child started at {fork_at} before the parent's kernel ended at {kernel_end}"
    );
    for track in [parent, child] {
        let mut on: Vec<&Slice> = p
            .slices
            .iter()
            .filter(|s| s.tid == track && s.dur > 0.0 && s.cat != "staged")
            .collect();
        on.sort_by(|x, y| x.ts.total_cmp(&y.ts));
        for w in on.windows(2) {
            ensure!(
                w[0].ts + w[0].dur <= w[1].ts + 1.0,
                "slices overlap on one stream: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
    Ok(())
}

/// A spin on the parent's stream and one on a fork's child, enqueued back to back, run
/// at once on the GPU: their slices overlap by most of their length.
fn work_that_overlaps_on_the_gpu_overlaps_in_the_trace() -> TestResult {
    let dev = device()?;
    let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    scope(&a, |s| spin(s, 1000))?; // compiled and loaded before the traced work
    let trace = Trace::new();
    scope(&a, |s| -> TestResult {
        s.trace_into(&trace)?;
        s.fork(&b, (), |c, ()| {
            spin(c, UNIT)?;
            spin(s, UNIT)
        })?;
        Ok(())
    })?;
    let p = parse(&trace)?;
    let kernels = named(&p, "spin_then_write_u32");
    ensure!(
        kernels.len() == 2 && kernels[0].tid != kernels[1].tid,
        "{kernels:?}"
    );
    let (x, y) = (kernels[0], kernels[1]);
    let overlap = (x.ts + x.dur).min(y.ts + y.dur) - x.ts.max(y.ts);
    ensure!(
        overlap > 0.5 * x.dur.min(y.dur),
        "two spins on two streams overlap by {overlap:.0} us of {:.0} and {:.0}",
        x.dur,
        y.dur
    );
    Ok(())
}

/// A scope never given a trace records nothing, even with a trace in reach; a traced
/// scope records only what it enqueues after `trace_into`, and a fork it made before
/// that records nothing.
fn untraced_scopes_and_work_before_trace_into_record_nothing() -> TestResult {
    let dev = device()?;
    let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    let trace = Trace::new();
    scope(&a, |s| -> TestResult {
        let mut x = s.alloc::<u32>(1024)?;
        s.fill(&mut x, 7)?;
        s.fork(&b, &mut x, |c, mut x| c.fill(&mut x, 8))?;
        Ok(())
    })?;
    ensure!(
        trace.is_empty(),
        "an untraced scope recorded {}",
        trace.len()
    );
    scope(&a, |s| -> TestResult {
        let mut x = s.alloc::<u32>(1024)?;
        s.fill(&mut x, 7)?;
        s.trace_into(&trace)?;
        s.zero(&mut x)?;
        Ok(())
    })?;
    let p = parse(&trace)?;
    ensure!(
        p.slices.len() == 1 && p.slices[0].cat == "fill" && p.slices[0].bytes == Some(4096),
        "{:?}",
        p.slices
    );
    Ok(())
}

/// An all_reduce on a one-rank communicator, in a traced scope: one `collective` slice
/// named after the operation, with the bytes it reduced. Skipped, saying so, without
/// NCCL.
fn a_collective_is_one_slice_with_its_bytes() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let id = match UniqueId::new() {
        Err(Error::NcclNotFound) => {
            eprintln!("skipped: NCCL is not installed here");
            return Ok(());
        }
        other => other?,
    };
    let comm = Communicator::join(&dev, &id, 0, 1)?;
    let trace = Trace::new();
    let input = vec![1.5f32; 4099];
    let mut out = vec![0f32; input.len()];
    scope(&stream, |s| -> TestResult {
        s.trace_into(&trace)?;
        let x = s.upload(&input)?;
        let mut y = s.alloc::<f32>(input.len())?;
        s.all_reduce(&comm, &x, &mut y, Sum)?;
        let _landed = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    ensure!(out == input, "one rank's all_reduce changed the data");
    let p = parse(&trace)?;
    let c: Vec<&Slice> = p.slices.iter().filter(|s| s.cat == "collective").collect();
    ensure!(
        c.len() == 1 && c[0].name == "all_reduce" && c[0].bytes == Some(4099 * 4),
        "{c:?}"
    );
    Ok(())
}

/// A captured graph (a fill and a kernel) replayed in a traced scope: one `graph` slice
/// that lasts at least as long as the graph's kernel ran when launched directly.
fn a_graph_replay_is_one_slice() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let (mut graph, ()) = dev.capture((), |g, ()| {
        let mut x = g.alloc::<u32>(1024)?;
        g.fill(&mut x, 3)
    })?;
    let trace = Trace::new();
    scope(&stream, |s| -> TestResult {
        s.trace_into(&trace)?;
        s.replay(&mut graph)?.wait()?;
        Ok(())
    })?;
    let p = parse(&trace)?;
    ensure!(
        p.slices.len() == 1
            && p.slices[0].name == "graph replay"
            && p.slices[0].cat == "graph"
            && p.slices[0].dur > 0.0,
        "{:?}",
        p.slices
    );
    Ok(())
}

/// Four threads, each with a scope on its own stream, record into one trace at once:
/// four tracks, each with its thread's fills in order, nothing lost.
fn scopes_on_several_threads_record_into_one_trace() -> TestResult {
    let dev = device()?;
    let streams: Vec<stream_core::Stream> = (0..4)
        .map(|_| dev.new_stream())
        .collect::<stream_core::Result<_>>()?;
    let trace = Trace::new();
    std::thread::scope(|threads| {
        let workers: Vec<_> = streams
            .iter()
            .map(|stream| {
                let trace = &trace;
                threads.spawn(move || {
                    scope(stream, |s| -> stream_core::Result<()> {
                        s.trace_into(trace)?;
                        let mut x = s.alloc::<u32>(1 << 16)?;
                        for v in 0..50 {
                            s.fill(&mut x, v)?;
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| "a worker panicked")?
                .map_err(|e| e.to_string())
        })
    })?;
    let p = parse(&trace)?;
    ensure!(
        p.lost == 0 && p.tracks == 4,
        "{} tracks, {} lost",
        p.tracks,
        p.lost
    );
    let mut per_track: HashMap<u64, Vec<&Slice>> = HashMap::new();
    for s in &p.slices {
        per_track.entry(s.tid).or_default().push(s);
    }
    ensure!(
        per_track.len() == 4 && per_track.values().all(|v| v.len() == 50),
        "slices per track: {:?}",
        per_track.values().map(Vec::len).collect::<Vec<_>>()
    );
    for slices in per_track.values() {
        ensure!(
            slices
                .windows(2)
                .all(|w| w[0].ts + w[0].dur <= w[1].ts + 1.0),
            "one thread's fills out of order on its stream"
        );
    }
    Ok(())
}

/// A traced scope on GPU 0 forks onto a stream of GPU 1, which fills memory of its own:
/// the trace has one process per GPU, the child's fill is on GPU 1's, and the fork's
/// and join's arrows cross between them.
fn a_fork_onto_another_gpu_records_on_that_gpu_s_process() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (a, b) = (d0.new_stream()?, d1.new_stream()?);
    let trace = Trace::new();
    scope(&a, |s| -> TestResult {
        s.trace_into(&trace)?;
        let mut x = s.alloc::<u32>(4096)?;
        s.fill(&mut x, 1)?;
        s.fork(&b, (), |c, ()| {
            let mut y = c.alloc::<u32>(4096)?;
            c.fill(&mut y, 2)
        })?;
        Ok(())
    })?;
    let json: Value = serde_json::from_str(&trace.to_chrome_json()?)
        .map_err(|e| format!("the trace is not JSON: {e}"))?;
    let events = json["traceEvents"].as_array().ok_or("no traceEvents")?;
    let fills: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "fill")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    let processes = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .count();
    let crossing = events
        .iter()
        .filter(|e| e["ph"] == "f" && e["pid"] == 1)
        .count();
    ensure!(
        fills == [0, 1] && processes == 2 && crossing == 1,
        "fills on processes {fills:?}, {processes} processes, {crossing} arrows into GPU 1"
    );
    Ok(())
}

/// Inside the scope, behind a long spin, writing the trace is an `Error::Trace` at once;
/// after the scope it works.
fn writing_a_trace_before_its_work_completes_is_an_error_not_a_wait() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let trace = Trace::new();
    scope(&stream, |s| -> TestResult {
        s.trace_into(&trace)?;
        spin(s, 4 * UNIT)?;
        let at = std::time::Instant::now();
        let err = expect_err("to_chrome_json behind a spin", trace.to_chrome_json())?;
        ensure!(
            at.elapsed() < std::time::Duration::from_millis(50),
            "the refusal took {:?}",
            at.elapsed()
        );
        check_error(
            "to_chrome_json behind a spin",
            &err,
            &Error::Trace {
                reason: "an operation it recorded has not completed on the GPU yet; write it \
                         after the scopes it records have ended",
            },
            &["cannot trace", "not completed"],
        )
    })?;
    ensure!(parse(&trace)?.slices.len() == 1, "the spin kernel, once");
    Ok(())
}

/// `trace_into` twice with the same trace is fine; with another, an `Error::Trace`, and
/// the scope keeps recording into the first.
fn a_scope_records_into_one_trace() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let (first, second) = (Trace::new(), Trace::new());
    scope(&stream, |s| -> TestResult {
        s.trace_into(&first)?;
        s.trace_into(&first)?;
        let err = expect_err("a second trace", s.trace_into(&second))?;
        check_error(
            "a second trace",
            &err,
            &Error::Trace {
                reason: "this scope already records into another trace",
            },
            &["another trace"],
        )?;
        let mut x = s.alloc::<u8>(10)?;
        s.zero(&mut x)?;
        Ok(())
    })?;
    ensure!(
        first.len() == 1 && second.is_empty(),
        "{first:?}, {second:?}"
    );
    Ok(())
}

/// Perfetto's trace processor (PyPI's `perfetto` package) loads the file written for
/// the first test's work and counts as many slices, and arrows, as the JSON holds.
/// Registered only with `STREAM_CORE_PERFETTO` set (see `main`); there, a missing
/// Python, package or trace processor is a failure.
fn perfetto_reads_the_same_operations() -> TestResult {
    let dev = device()?;
    let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    let trace = Trace::new();
    let input = vec![1u8; 1 << 20];
    scope(&a, |s| -> TestResult {
        s.trace_into(&trace)?;
        let x = s.upload(&input)?;
        s.fork(&b, &x, |c, x| {
            c.copy_device(&x, &mut c.alloc::<u8>(x.len())?)
        })?;
        Ok(())
    })?;
    let path = std::env::temp_dir().join(format!("stream-core-trace-{}.json", std::process::id()));
    trace.write_chrome_json(&path)?;
    let p = parse(&trace)?;
    let script = r#"
import sys
from perfetto.trace_processor import TraceProcessor
tp = TraceProcessor(trace=sys.argv[1])
n = lambda q: next(iter(tp.query(q))).n
print("slices", n("select count(*) as n from slice"), "flows", n("select count(*) as n from flow"))
"#;
    let run = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let output = match run {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            return Err(format!(
                "python3 with Perfetto's trace processor failed ({PERFETTO_ENV} is set): {}",
                String::from_utf8_lossy(&o.stderr)
            )
            .into())
        }
        Err(e) => return Err(format!("cannot run python3 ({PERFETTO_ENV} is set): {e}").into()),
    };
    let expected = format!("slices {} flows {}", p.slices.len(), p.flows.len() / 2);
    ensure!(
        output.trim() == expected,
        "Perfetto read {:?}, the JSON holds {expected:?}",
        output.trim()
    );
    Ok(())
}
