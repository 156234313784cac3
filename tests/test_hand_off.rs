//! Hand-offs (`stream-core/src/scope/hand_off.rs`): a buffer handed from one scope to
//! another, parent to child or child to parent, is ordered after every write the giver
//! enqueued before the hand-off, including writes after the fork began, and a
//! pipeline over three streams that moves its buffers only by hand-off is correct.
//!
//! Long spinning kernels (`gpu_tests::spin`) are queued in front of the work under
//! test, so that a missing cross-stream dependency would show as wrong data.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{check_eq, poisoned, spin, stream, Rng, TestResult};
use stream_core::scope;

gpu_tests::test_main! {
    gpu: [
        hand_off_inside_a_fork_is_ordered_after_the_parents_later_writes,
        child_hands_its_result_back_to_the_parent,
        pipeline_over_three_streams_with_hand_offs_is_correct_under_delays,
    ],
}

/// About 50 ms of spinning on an H100/H200 (clocks near 2 GHz): long enough that a
/// missing dependency would let the other stream run first.
const SPIN: u64 = 100_000_000;

fn times(input: &[f32], factor: f32) -> Vec<f32> {
    input.iter().map(|v| v * factor).collect()
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
