//! Several streams and threads: fork/join with lent buffers, hand-offs, `DeviceVec`s
//! used on several streams and threads in sequence, many threads each driving its own
//! streams, and proof that nothing waits for the whole device.
//!
//! Long spinning kernels (`spin_then_write_u32`) are queued in front of the work under
//! test, so that a missing cross-stream dependency would show as wrong data: without
//! the event, the other stream would read before the write has happened.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, ensure, panic_message, poisoned, spin, stream, Element, Failed, Rng, TestResult,
};
use stream_core::{scope, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        child_reads_what_the_parent_wrote_behind_a_long_kernel,
        parent_reads_what_the_child_wrote_behind_a_long_kernel_after_the_join,
        buffer_lent_by_value_is_handed_to_the_child,
        hand_off_inside_a_fork_is_ordered_after_the_parents_later_writes,
        child_hands_its_result_back_to_the_parent,
        pipeline_over_three_streams_with_hand_offs_is_correct_under_delays,
        fork_with_six_lent_items_sees_each_of_them,
        grandchild_uses_memory_lent_by_the_child,
        fork_onto_the_parents_own_stream_is_correct,
        failing_child_is_still_joined_before_the_parent_continues,
        fork_returns_while_the_childs_long_kernel_is_still_running,
        scope_on_b_completes_while_a_long_kernel_runs_on_a,
        scope_on_another_thread_completes_while_a_long_kernel_runs_on_a,
        device_vec_used_on_three_streams_and_two_threads_in_sequence,
        eight_threads_run_thousands_of_scopes_with_random_sizes,
    ],
}

/// About 50 ms of spinning on an H100/H200 (clocks near 2 GHz): long enough that a
/// missing dependency would let the other stream run first.
const SPIN: u64 = 100_000_000;

/// About one second of spinning: long enough to observe a stream still busy.
const LONG_SPIN: u64 = 2_000_000_000;

fn times(input: &[f32], factor: f32) -> Vec<f32> {
    input.iter().map(|v| v * factor).collect()
}

/// The parent writes `y = 2x` behind a long kernel on its stream, then lends `y` to a
/// child on a second stream, which computes `3y` and downloads it. The child must see
/// the parent's write: its stream waits for the parent's work through the fork's event.
fn child_reads_what_the_parent_wrote_behind_a_long_kernel() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 22) + 5;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let mut y = s.alloc::<f32>(n)?;
        s.fill(&mut y, f32::POISON)?;
        spin(s, SPIN)?;
        kernels::scale(s, 2.0, &x, &mut y)?;
        s.fork(&b, &y, |c, y| -> TestResult {
            let mut z = c.alloc::<f32>(n)?;
            kernels::scale(c, 3.0, &y, &mut z)?;
            let _download = c.copy_to_host(&z, &mut out)?;
            Ok(())
        })
    })?;
    check_eq(
        "3 * (2 * x) computed by the child",
        &times(&times(&input, 2.0), 3.0),
        &out,
    )
}

/// The child writes into a buffer the parent lent it exclusively, behind a long kernel
/// on the child's stream; the parent downloads it right after the fork. The join (an
/// event, not a host wait) must order the parent's download after the child's write.
fn parent_reads_what_the_child_wrote_behind_a_long_kernel_after_the_join() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 22) + 1;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let mut y = s.alloc::<f32>(n)?;
        s.fill(&mut y, f32::POISON)?;
        s.fork(&b, (&x, &mut y), |c, (x, mut y)| -> TestResult {
            spin(c, SPIN)?;
            kernels::scale(c, 2.0, &x, &mut y)?;
            Ok(())
        })?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "2 * x written by the child, read by the parent",
        &times(&input, 2.0),
        &out,
    )
}

/// A buffer moved into the fork becomes the child's: written by the parent behind a
/// long kernel before the fork, read by the child, freed on the child's stream.
fn buffer_lent_by_value_is_handed_to_the_child() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 20) + 7;
    let value: u32 = Rng::new().value();
    let mut out = poisoned::<u32>(n);
    scope(&a, |s| -> TestResult {
        let mut x = s.alloc::<u32>(n)?;
        spin(s, SPIN)?;
        s.fill(&mut x, value)?;
        s.fork(&b, x, |c, x| -> TestResult {
            let _download = c.copy_to_host(&x, &mut out)?;
            Ok(())
        })
    })?;
    check_eq("buffer handed to the child", &vec![value; n], &out)
}

/// Inside a fork, the parent keeps working on a buffer (behind a long kernel) and only
/// then hands it to the child: the hand-off's own event must order the child after that
/// later work, which the fork's start event does not cover.
fn hand_off_inside_a_fork_is_ordered_after_the_parents_later_writes() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 20) + 3;
    let value: u32 = Rng::new().value();
    let mut out = poisoned::<u32>(n);
    scope(&a, |s| -> TestResult {
        let mut x = s.alloc_zeroed::<u32>(n)?;
        s.fork(&b, (), |c, ()| -> TestResult {
            spin(s, SPIN)?;
            s.fill(&mut x, value)?;
            let x = s.hand_off(x, c)?;
            let _download = c.copy_to_host(&x, &mut out)?;
            Ok(())
        })
    })?;
    check_eq(
        "buffer handed off after the parent's late write",
        &vec![value; n],
        &out,
    )
}

/// The child produces a buffer behind a long kernel and hands it to the parent, which
/// returns it out of the fork and downloads it.
fn child_hands_its_result_back_to_the_parent() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 21) + 9;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let result = s.fork(&b, &x, |c, x| {
            let mut y = c.alloc::<f32>(n)?;
            spin(c, SPIN)?;
            kernels::scale(c, 2.0, &x, &mut y)?;
            c.hand_off(y, s)
        })?;
        s.copy_to_host(&result, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("result handed back by the child", &times(&input, 2.0), &out)
}

/// A three-stage pipeline: the parent uploads chunks, one child scales them, a second
/// child downloads them; buffers move by hand-off, and random chunks are delayed by
/// long kernels on one of the three streams. Every chunk must come out right.
fn pipeline_over_three_streams_with_hand_offs_is_correct_under_delays() -> TestResult {
    let upload_stream = stream()?;
    let compute_stream = upload_stream.device().new_stream()?;
    let download_stream = upload_stream.device().new_stream()?;
    let chunk = (1 << 18) + 11;
    let chunks = 24;
    let mut rng = Rng::new();
    let input: Vec<f32> = rng.vec(chunk * chunks);
    let delays: Vec<usize> = (0..chunks).map(|_| rng.below(4)).collect();
    let mut out = poisoned::<f32>(chunk * chunks);
    scope(&upload_stream, |up| -> TestResult {
        up.fork(&compute_stream, (), |compute, ()| -> TestResult {
            up.fork(&download_stream, (), |down, ()| -> TestResult {
                for ((source, destination), delay) in
                    input.chunks(chunk).zip(out.chunks_mut(chunk)).zip(&delays)
                {
                    let x = up.upload(source)?;
                    if *delay == 1 {
                        spin(up, SPIN / 4)?;
                    }
                    let x = up.hand_off(x, compute)?;
                    let mut y = compute.alloc::<f32>(chunk)?;
                    if *delay == 2 {
                        spin(compute, SPIN / 4)?;
                    }
                    kernels::scale(compute, 2.0, &x, &mut y)?;
                    let y = compute.hand_off(y, down)?;
                    if *delay == 3 {
                        spin(down, SPIN / 4)?;
                    }
                    let _download = down.copy_to_host(&y, destination)?;
                }
                Ok(())
            })
        })
    })?;
    check_eq("pipelined chunks", &times(&input, 2.0), &out)
}

/// Six items lent at once (shared, exclusive, by value, views): each arrives intact.
fn fork_with_six_lent_items_sees_each_of_them() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = 4099;
    let mut rng = Rng::new();
    let inputs: [Vec<u32>; 3] = [rng.vec(n), rng.vec(n), rng.vec(n)];
    let mut outs = [poisoned::<u32>(n), poisoned::<u32>(n), poisoned::<u32>(n)];
    let [o0, o1, o2] = &mut outs;
    scope(&a, |s| -> TestResult {
        let x0 = s.upload(&inputs[0])?;
        let x1 = s.upload(&inputs[1])?;
        let x2 = s.upload(&inputs[2])?;
        let mut y = s.alloc::<u32>(3 * n)?;
        let (mut y0, rest) = y.split_at_mut(n)?;
        let (y1, mut y2) = rest.into_split_at_mut(n)?;
        spin(s, SPIN)?;
        s.copy_device(&x0, &mut y0)?;
        s.fork(
            &b,
            (&x0, x1.as_slice(), x2, &mut y0, y1, &mut y2),
            |c, lent| -> TestResult {
                let (x0, x1, x2, mut y0, mut y1, mut y2) = lent;
                c.copy_device(&x1, &mut y1)?;
                c.copy_device(&x2, &mut y2)?;
                c.copy_to_host(&y0, o0)?.wait()?;
                c.copy_to_host(&y1, o1)?.wait()?;
                c.copy_to_host(&y2, o2)?.wait()?;
                c.fill(&mut y0, 0)?;
                ensure!(
                    x0.len() == n,
                    "lent view has {} elements, expected {n}",
                    x0.len()
                );
                Ok(())
            },
        )
    })?;
    check_eq(
        "item 0 (copied by the parent behind a spin)",
        &inputs[0],
        &outs[0],
    )?;
    check_eq("item 1 (copied by the child)", &inputs[1], &outs[1])?;
    check_eq("item 2 (handed to the child)", &inputs[2], &outs[2])
}

/// A child forks a grandchild and lends it the child's own buffer, written behind a
/// long kernel on the child's stream.
fn grandchild_uses_memory_lent_by_the_child() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let d = a.device().new_stream()?;
    let n = (1 << 20) + 1;
    let value: u32 = Rng::new().value();
    let mut out = poisoned::<u32>(n);
    scope(&a, |s| -> TestResult {
        s.fork(&b, (), |c, ()| -> TestResult {
            let mut y = c.alloc::<u32>(n)?;
            spin(c, SPIN)?;
            c.fill(&mut y, value)?;
            c.fork(&d, &y, |g, y| -> TestResult {
                let _download = g.copy_to_host(&y, &mut out)?;
                Ok(())
            })
        })
    })?;
    check_eq(
        "child's buffer read by the grandchild",
        &vec![value; n],
        &out,
    )
}

/// Forking onto the stream the parent already uses is allowed and stays correct.
fn fork_onto_the_parents_own_stream_is_correct() -> TestResult {
    let a = stream()?;
    let n = 100_003;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let mut y = s.alloc::<f32>(n)?;
        s.fork(s.stream(), (&x, &mut y), |c, (x, mut y)| {
            kernels::scale(c, 2.0, &x, &mut y)
        })?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("fork on the same stream", &times(&input, 2.0), &out)
}

/// A child that enqueues a write behind a long kernel and then returns an error: `fork`
/// returns that error, and the parent's later download still sees the write (the join
/// happens on every exit).
fn failing_child_is_still_joined_before_the_parent_continues() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 20) + 5;
    let value: u32 = Rng::new().value();
    let mut out = poisoned::<u32>(n);
    scope(&a, |s| -> TestResult {
        let mut y = s.alloc_zeroed::<u32>(n)?;
        let forked = s.fork(&b, &mut y, |c, mut y| -> Result<(), Failed> {
            spin(c, SPIN)?;
            c.fill(&mut y, value)?;
            Err(Failed::from("the child's own error"))
        });
        let error = match forked {
            Err(e) => e,
            Ok(()) => return Err("fork returned Ok although the child failed".into()),
        };
        ensure!(
            error.message() == Some("the child's own error"),
            "fork returned {:?}, expected the child's own error",
            error.message()
        );
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("child's write after its error", &vec![value; n], &out)
}

/// `fork` does not block the host: it returns while the child's one-second kernel is
/// still running on the child's stream.
fn fork_returns_while_the_childs_long_kernel_is_still_running() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let mut busy_after_fork = false;
    let mut fork_took = Duration::ZERO;
    scope(&a, |s| -> TestResult {
        spin(s, 0)?; // load the kernel module outside the timing
        let start = Instant::now();
        s.fork(&b, (), |c, ()| spin(c, LONG_SPIN))?;
        fork_took = start.elapsed();
        busy_after_fork = !b.is_idle()?;
        Ok(())
    })?;
    ensure!(
        busy_after_fork,
        "the child's stream was idle right after fork returned (took {fork_took:?})"
    );
    ensure!(
        fork_took < Duration::from_millis(200),
        "fork took {fork_took:?}: it waited for the child's kernel on the host"
    );
    ensure!(
        b.is_idle()?,
        "the child's stream is still busy after the scope ended"
    );
    Ok(())
}

/// A scope on stream B runs to completion (its final synchronisation included) while a
/// one-second kernel is still running on stream A, on the same thread: the library
/// synchronises one stream, never the device.
fn scope_on_b_completes_while_a_long_kernel_runs_on_a() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = 65_537;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    let mut report = (false, Duration::ZERO);
    scope(&a, |s| -> TestResult {
        // Load both kernel modules (the spin kernel's and `kernels::scale`'s) outside
        // the timing: loading a module waits for the device.
        spin(s, 0)?;
        warm_up_scale(s)?;
        spin(s, LONG_SPIN)?;
        let start = Instant::now();
        scope(&b, |t| -> TestResult {
            let x = t.upload(&input)?;
            let mut y = t.alloc::<f32>(n)?;
            kernels::scale(t, 2.0, &x, &mut y)?;
            t.copy_to_host(&y, &mut out)?.wait()?;
            Ok(())
        })?;
        report = (!a.is_idle()?, start.elapsed());
        Ok(())
    })?;
    let (a_busy, b_took) = report;
    ensure!(
        a_busy,
        "stream A was idle when B's scope ended (B took {b_took:?}): overlap not shown"
    );
    ensure!(
        b_took < Duration::from_millis(500),
        "B's scope took {b_took:?}: it waited for A"
    );
    check_eq("B's result", &times(&input, 2.0), &out)
}

/// Launches `kernels::scale` once on a few elements, so that its module is loaded (a
/// module's first load waits for the device, which would hide the overlap measured).
fn warm_up_scale<'s>(s: &'s Scope<'s, '_>) -> Result<(), Error> {
    let x = s.alloc_zeroed::<f32>(4)?;
    let mut y = s.alloc::<f32>(4)?;
    kernels::scale(s, 1.0, &x, &mut y)
}

/// As above, across threads: one thread keeps stream A busy for about a second inside
/// its scope; another thread's scope on stream B finishes meanwhile.
fn scope_on_another_thread_completes_while_a_long_kernel_runs_on_a() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = 65_537;
    let input: Vec<f32> = Rng::new().vec(n);
    let launched = Barrier::new(2);
    std::thread::scope(|t| -> TestResult {
        let holder = t.spawn(|| -> TestResult {
            scope(&a, |s| -> TestResult {
                spin(s, 0)?;
                warm_up_scale(s)?;
                spin(s, LONG_SPIN)?;
                launched.wait();
                Ok(())
            })
        });
        launched.wait();
        let mut out = poisoned::<f32>(n);
        let start = Instant::now();
        scope(&b, |s| -> TestResult {
            let x = s.upload(&input)?;
            let mut y = s.alloc::<f32>(n)?;
            kernels::scale(s, 2.0, &x, &mut y)?;
            s.copy_to_host(&y, &mut out)?.wait()?;
            Ok(())
        })?;
        let b_took = start.elapsed();
        let a_busy = !a.is_idle()?;
        holder.join().map_err(|p| {
            Failed::from(format!("thread holding A panicked: {}", panic_message(&*p)))
        })??;
        ensure!(
            a_busy,
            "stream A was idle when B's scope ended (B took {b_took:?})"
        );
        ensure!(
            b_took < Duration::from_millis(500),
            "B's scope took {b_took:?}: it waited for A"
        );
        check_eq("B's result", &times(&input, 2.0), &out)
    })
}

/// One `DeviceVec`, written behind a long kernel on stream A, then scaled on stream B,
/// then read on stream C from another thread, then moved to a fourth thread and read
/// there: each use sees the previous one's writes.
fn device_vec_used_on_three_streams_and_two_threads_in_sequence() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let c = a.device().new_stream()?;
    let dev = a.device().clone();
    let n = (1 << 20) + 3;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut v = dev.alloc_vec::<f32>(n)?;
    scope(&a, |s| -> TestResult {
        let mut w = s.attach(&mut v)?;
        spin(s, SPIN)?;
        s.copy_to_device(&input, &mut w)?;
        Ok(())
    })?;
    scope(&b, |s| -> TestResult {
        let mut w = s.attach(&mut v)?;
        let mut tmp = s.alloc::<f32>(n)?;
        spin(s, SPIN)?;
        s.copy_device(&w, &mut tmp)?;
        kernels::scale(s, 2.0, &tmp, &mut w)?;
        Ok(())
    })?;
    let from_c = std::thread::scope(|t| {
        t.spawn(|| -> Result<Vec<f32>, Failed> {
            let mut out = poisoned::<f32>(n);
            scope(&c, |s| -> TestResult {
                let w = s.attach_ref(&v)?;
                s.copy_to_host(&w, &mut out)?.wait()?;
                Ok(())
            })?;
            Ok(out)
        })
        .join()
        .map_err(|p| Failed::from(format!("reader thread panicked: {}", panic_message(&*p))))
    })??;
    check_eq(
        "DeviceVec read on stream C, another thread",
        &times(&input, 2.0),
        &from_c,
    )?;
    let moved = std::thread::spawn(move || -> Result<Vec<f32>, String> {
        v.to_host_vec().map_err(|e| e.to_string())
    })
    .join()
    .map_err(|p| {
        Failed::from(format!(
            "thread owning the DeviceVec panicked: {}",
            panic_message(&*p)
        ))
    })?
    .map_err(Failed::from)?;
    check_eq(
        "DeviceVec moved to another thread",
        &times(&input, 2.0),
        &moved,
    )
}

/// Eight threads, each with two streams of its own, run 1500 scopes each with random
/// sizes (0 to 256 Ki elements): upload, scale (on the scope's stream or in a fork on
/// the thread's second stream), download, wait, check against the CPU.
fn eight_threads_run_thousands_of_scopes_with_random_sizes() -> TestResult {
    const THREADS: usize = 8;
    const SCOPES: usize = 1500;
    let dev = stream()?.device().clone();
    let seeds: Vec<u64> = {
        let mut rng = Rng::new();
        (0..THREADS).map(|_| rng.next_u64()).collect()
    };
    let start = Instant::now();
    let results: Vec<Result<usize, Failed>> = std::thread::scope(|t| {
        let workers: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                let dev = dev.clone();
                t.spawn(move || -> Result<usize, Failed> {
                    let main = dev.new_stream()?;
                    let side = dev.new_stream()?;
                    let mut rng = Rng::with_seed(seed);
                    let mut elements = 0;
                    for round in 0..SCOPES {
                        let n = rng.below(1 << 18);
                        elements += n;
                        let input: Vec<f32> = rng.vec(n);
                        let mut out = poisoned::<f32>(n);
                        let use_fork = round % 3 == 0;
                        scope(&main, |s| -> TestResult {
                            let x = s.upload(&input)?;
                            let mut y = s.alloc::<f32>(n)?;
                            if use_fork {
                                s.fork(&side, (&x, &mut y), |c, (x, mut y)| {
                                    kernels::scale(c, 2.0, &x, &mut y)
                                })?;
                            } else {
                                kernels::scale(s, 2.0, &x, &mut y)?;
                            }
                            s.copy_to_host(&y, &mut out)?.wait()?;
                            Ok(())
                        })
                        .map_err(|f| {
                            Failed::from(format!(
                                "round {round}, n = {n}: {}",
                                f.message().unwrap_or("")
                            ))
                        })?;
                        check_eq(
                            &format!("round {round}, n = {n}"),
                            &times(&input, 2.0),
                            &out,
                        )?;
                    }
                    Ok(elements)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|p| Failed::from(format!("worker panicked: {}", panic_message(&*p))))?
            })
            .collect()
    });
    let mut total = 0;
    for (i, result) in results.into_iter().enumerate() {
        total += result
            .map_err(|f| Failed::from(format!("thread {i}: {}", f.message().unwrap_or(""))))?;
    }
    println!(
        "eight_threads: {} scopes, {total} elements checked, in {:?}",
        THREADS * SCOPES,
        start.elapsed()
    );
    Ok(())
}
