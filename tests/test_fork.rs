//! Forks (`stream-core/src/scope/fork.rs`) and what a fork lends its child
//! (`scope/lend.rs`): the child on a second stream sees what the parent wrote before
//! the fork, the parent sees what the child wrote after the join, buffers lent shared,
//! exclusively, by value and as views arrive intact, a grandchild uses what the child
//! lends it, a failing child is still joined, a scope's repeated forks (which reuse
//! one event) order every fork and join, and `fork` never blocks the host.
//! (Hand-offs between a parent and its children are tested in `test_hand_off.rs`.)
//!
//! Long spinning kernels (`gpu_tests::spin`) are queued in front of the work under
//! test, so that a missing cross-stream dependency would show as wrong data: without
//! the fork's or the join's event, the other stream would read before the write has
//! happened.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{check_eq, ensure, poisoned, spin, stream, Element, Failed, Rng, TestResult};
use stream_core::{scope, DeviceBuffer, DeviceMemoryMut, Scope};

gpu_tests::test_main! {
    gpu: [
        child_reads_what_the_parent_wrote_behind_a_long_kernel,
        parent_reads_what_the_child_wrote_behind_a_long_kernel_after_the_join,
        buffer_lent_by_value_is_handed_to_the_child,
        fork_with_six_lent_items_sees_each_of_them,
        fork_lends_options_of_each_kind,
        grandchild_uses_memory_lent_by_the_child,
        fork_onto_the_parents_own_stream_is_correct,
        failing_child_is_still_joined_before_the_parent_continues,
        fork_returns_while_the_childs_long_kernel_is_still_running,
        repeated_forks_of_one_scope_order_every_fork_and_join,
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

/// `Option`s lent (shared, exclusive, by value, and `None`s of each): a `Some` arrives
/// as its item would, behind the parent's long kernel; a `None` arrives as `None`. The
/// parent then reads what the child wrote through the lent `Some(&mut y)`.
fn fork_lends_options_of_each_kind() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = (1 << 20) + 3;
    let mut rng = Rng::new();
    let (input, moved): (Vec<u32>, Vec<u32>) = (rng.vec(n), rng.vec(n));
    let (mut copied, mut handed, mut back) = (poisoned::<u32>(n), poisoned(n), poisoned(n));
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let mut y = s.alloc::<u32>(n)?;
        let mut z = s.alloc::<u32>(n)?;
        spin(s, SPIN)?;
        s.copy_to_device(&moved, &mut z)?;
        // A `None` names its type, as a `None` a program computes would have.
        let none_shared: Option<&DeviceBuffer<'_, u32>> = None;
        let none_exclusive: Option<&mut DeviceBuffer<'_, u32>> = None;
        let none_moved: Option<DeviceBuffer<'_, u32>> = None;
        let lent = (
            Some(&x),
            Some(&mut y),
            Some(z),
            none_shared,
            none_exclusive,
            none_moved,
        );
        s.fork(&b, lent, |c, lent| -> TestResult {
            let (Some(x), Some(mut y), Some(z), None, None, None) = lent else {
                return Err(Failed::from("a Some arrived as None, or a None as Some"));
            };
            c.copy_device(&x, &mut y)?;
            c.copy_to_host(&x, &mut copied)?.wait()?;
            c.copy_to_host(&z, &mut handed)?.wait()?;
            Ok(())
        })?;
        s.copy_to_host(&y, &mut back)?.wait()?;
        Ok(())
    })?;
    check_eq("Some(&x) read by the child", &input, &copied)?;
    check_eq("Some(z) handed to the child", &moved, &handed)?;
    check_eq("Some(&mut y) written by the child", &input, &back)
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

/// Eight forks in a row from one scope, to two child streams in turn and once through a
/// grandchild on a third, and once with the parent forking again (to a fourth stream,
/// `z = 3x`) inside an open fork: each child doubles `y` behind a spinning kernel, and
/// after each join the parent adds `x` behind another. The ops do not commute, so a
/// fork whose child did not wait for the parent's last addition, or a join the parent
/// did not wait for, changes the result; the scope reuses its fork's event from one
/// fork to the next, which must order each of them all the same. Expected:
/// `y = (2^9 - 1) x`, computed on the CPU in the same order (each step rounds once, as
/// on the GPU).
fn repeated_forks_of_one_scope_order_every_fork_and_join() -> TestResult {
    let a = stream()?;
    let dev = a.device();
    let (b, c) = (dev.new_stream()?, dev.new_stream()?);
    let (d, e) = (dev.new_stream()?, dev.new_stream()?);
    let n = (1 << 20) + 3;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    let mut tripled = poisoned::<f32>(n);
    let spin_cycles = SPIN / 10; // about 5 ms: 17 of them in the test
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        let mut y = s.upload(&input)?;
        let mut z = s.alloc::<f32>(n)?;
        for round in 0..8 {
            let child = if round % 2 == 0 { &b } else { &c };
            s.fork(child, &mut y, |ch, mut y| -> TestResult {
                if round == 2 {
                    // The parent forks again while this fork is open: that fork takes a
                    // spare event (this one holds the kept one) and keeps its own at
                    // its end, which this fork's end then replaces.
                    s.fork(&e, (&x, &mut z), |g, (x, mut z)| -> TestResult {
                        spin(g, spin_cycles)?;
                        kernels::scale(g, 3.0f32, &x, &mut z)?;
                        Ok(())
                    })?;
                }
                if round == 5 {
                    // A fork inside the child: the grandchild doubles `y` on a third stream.
                    ch.fork(&d, &mut y, |g, mut y| -> TestResult {
                        double_behind_a_spin(g, spin_cycles, &mut y)
                    })?;
                    return Ok(());
                }
                double_behind_a_spin(ch, spin_cycles, &mut y)
            })?;
            spin(s, spin_cycles)?;
            kernels::axpy(s, 1.0f32, &x, &mut y)?;
        }
        s.copy_to_host(&y, &mut out)?.wait()?;
        s.copy_to_host(&z, &mut tripled)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "3x, from a fork the parent made inside another fork",
        &times(&input, 3.0),
        &tripled,
    )?;
    let mut expected = input.clone();
    for _ in 0..8 {
        for (e, &x) in expected.iter_mut().zip(&input) {
            *e = 2.0 * *e + x;
        }
    }
    check_eq(
        "y after eight rounds of y = 2y (child), y += x (parent)",
        &expected,
        &out,
    )
}

/// `y = 2y` on `s`'s stream behind a spinning kernel (through a temporary: `scale` reads
/// and writes distinct memory).
fn double_behind_a_spin<'s>(
    s: &'s Scope<'s, '_>,
    cycles: u64,
    y: &mut impl DeviceMemoryMut<'s, f32>,
) -> TestResult {
    spin(s, cycles)?;
    let mut doubled = s.alloc::<f32>(y.len())?;
    kernels::scale(s, 2.0f32, &*y, &mut doubled)?;
    s.copy_device(&doubled, y)?;
    Ok(())
}
