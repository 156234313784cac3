//! `PreMulSum` (`stream-core/src/nccl/pre_mul_sum.rs`): the sum of each rank's elements
//! times its own factor. Every reducing collective (all_reduce out of place and in
//! place, reduce, reduce_scatter) with each rank's factor different, for float and
//! integer element types, compared bit for bit with the CPU (inputs and factors chosen
//! so every product and sum is exact); one made and dropped inside a group before its
//! end, and one dropped after a capture recorded it, still reduce as made; one of
//! another communicator is refused before anything is enqueued; after an abort it is
//! refused, and dropping it is harmless.
//!
//! The ranks are every visible GPU, one thread each (`join`), or one thread for all
//! (`for_devices`, in a group); on one GPU, communicators of one rank. A reduction two
//! ranks of one process disagree on (a `PreMulSum` and a `Sum`, or `PreMulSum`s of
//! different lengths, where the stand-in makes its own): `test_nccl_ledger`.

use gpu_tests::nccl_ranks::{
    devices_of, exclusive, on_ranks, rank_count, rank_input, streams_of, NcclValue,
};
use gpu_tests::{check_eq, ensure, poisoned, Rng, TestResult};
use stream_core::nccl::{self, Communicator, PreMulSum, UniqueId};
use stream_core::{scope, Device, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        pre_multiplied_sums_match_the_cpu_f32 = pre_multiplied_sums_match_the_cpu::<f32>,
        pre_multiplied_sums_match_the_cpu_f64 = pre_multiplied_sums_match_the_cpu::<f64>,
        pre_multiplied_sums_match_the_cpu_f16 = pre_multiplied_sums_match_the_cpu::<half::f16>,
        pre_multiplied_sums_match_the_cpu_bf16 = pre_multiplied_sums_match_the_cpu::<half::bf16>,
        pre_multiplied_sums_match_the_cpu_i32 = pre_multiplied_sums_match_the_cpu::<i32>,
        pre_multiplied_sums_match_the_cpu_u8 = pre_multiplied_sums_match_the_cpu::<u8>,
        pre_multiplied_sums_match_the_cpu_u64 = pre_multiplied_sums_match_the_cpu::<u64>,
        one_made_and_dropped_inside_a_group_reduces_at_the_groups_end,
        one_dropped_after_a_capture_reduces_at_every_replay,
        one_of_another_communicator_is_refused_and_enqueues_nothing,
        after_an_abort_it_is_refused_and_dropping_it_is_harmless,
    ],
}

/// Rank `rank`'s factor: `(rank + 1) / 2` where `T` holds it exactly (floats), else
/// `rank + 2` (integers; inputs are at most 4 in magnitude, so a sum over 8 ranks stays
/// within `u8`).
fn factor<T: NcclValue>(rank: usize) -> T {
    let half = 0.5 * (rank + 1) as f64;
    let value = T::from_f64(half);
    if value.to_f64() == half {
        value
    } else {
        T::from_f64((rank + 2) as f64)
    }
}

/// `Σ_r factor(r) × inputs[r]`, element-wise (in `f64`: exact for these values).
fn pre_multiplied<T: NcclValue>(inputs: &[Vec<T>]) -> Vec<T> {
    (0..inputs[0].len())
        .map(|i| {
            let total = inputs
                .iter()
                .enumerate()
                .map(|(r, x)| factor::<T>(r).to_f64() * x[i].to_f64())
                .sum();
            T::from_f64(total)
        })
        .collect()
}

/// Every rank's input of `len` elements.
fn inputs_of<T: NcclValue>(seed: u64, ranks: usize, len: usize) -> Vec<Vec<T>> {
    (0..ranks)
        .map(|r| rank_input(seed, r, len, false))
        .collect()
}

/// all_reduce (out of place, in place), reduce to the last rank and reduce_scatter with
/// each rank's own factor, at 0, 1, 1001 and 1 Mi elements per rank, on every GPU.
fn pre_multiplied_sums_match_the_cpu<T: NcclValue>() -> TestResult {
    let seed = Rng::new().next_u64();
    let ranks = rank_count()?;
    let cases: Vec<_> = [0, 1, 1001, 1 << 20]
        .into_iter()
        .map(|count| {
            let inputs = inputs_of::<T>(seed ^ count as u64, ranks, count);
            let wide = inputs_of::<T>(seed ^ 0x5CA7 ^ count as u64, ranks, count * ranks);
            let (sum, wide_sum) = (pre_multiplied(&inputs), pre_multiplied(&wide));
            (count, inputs, sum, wide, wide_sum)
        })
        .collect();
    on_ranks(ranks, |rank, comm, stream| {
        let op = comm.pre_mul_sum(factor::<T>(rank))?;
        let got = op.factor().to_f64();
        ensure!(got == factor::<T>(rank).to_f64(), "factor {got}");
        let root = ranks - 1;
        for (count, inputs, sum, wide, wide_sum) in &cases {
            let (count, name) = (*count, T::NAME);
            let (mut out, mut in_place, mut reduced, mut scattered) = (
                poisoned::<T>(count),
                poisoned::<T>(count),
                poisoned::<T>(count),
                poisoned::<T>(count),
            );
            scope(stream, |s| {
                let (x, w) = (s.upload(&inputs[rank])?, s.upload(&wide[rank])?);
                let (mut y, mut z, mut v) = (
                    s.alloc::<T>(count)?,
                    s.upload(&inputs[rank])?,
                    s.alloc::<T>(count)?,
                );
                let mut u = s.alloc::<T>(count)?;
                for buf in [&mut y, &mut v, &mut u] {
                    s.fill(buf, T::POISON)?;
                }
                s.all_reduce(comm, &x, &mut y, &op)?;
                s.all_reduce_in_place(comm, &mut z, &op)?;
                s.reduce(comm, &x, &mut v, &op, root)?;
                s.reduce_scatter(comm, &w, &mut u, &op)?;
                s.copy_to_host(&y, &mut out)?.wait()?;
                s.copy_to_host(&z, &mut in_place)?.wait()?;
                s.copy_to_host(&v, &mut reduced)?.wait()?;
                s.copy_to_host(&u, &mut scattered)?.wait()?;
                Ok::<_, Error>(())
            })?;
            check_eq(&format!("all_reduce of {count} {name}"), sum, &out)?;
            check_eq(
                &format!("all_reduce_in_place of {count} {name}"),
                sum,
                &in_place,
            )?;
            if rank == root {
                check_eq(&format!("reduce of {count} {name}"), sum, &reduced)?;
            }
            let block = &wide_sum[rank * count..(rank + 1) * count];
            check_eq(
                &format!("reduce_scatter of {count} {name}"),
                block,
                &scattered,
            )?;
        }
        Ok(())
    })
}

/// One thread drives every device (at most two, `for_devices`): inside one group, each
/// device's `PreMulSum` is made, given to its all_reduce, and dropped before the group
/// ends (NCCL copies it into the call); the results are the factors' sum.
fn one_made_and_dropped_inside_a_group_reduces_at_the_groups_end() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let streams = streams_of(&devices)?;
    let count = 4099;
    let inputs = inputs_of::<f32>(Rng::new().next_u64(), ranks, count);
    let expected = pre_multiplied(&inputs);
    let mut results = vec![poisoned::<f32>(count); ranks];
    let (first, rest) = results.split_at_mut(1);
    scope(&streams[0], |a| {
        let mut x = a.upload(&inputs[0])?;
        if ranks == 1 {
            nccl::group(|g| {
                let op = comms[0].pre_mul_sum(factor::<f32>(0))?;
                g.all_reduce_in_place(a, &comms[0], &mut x, &op)?;
                drop(op);
                Ok::<_, Error>(())
            })?;
        } else {
            scope(&streams[1], |b| {
                let mut y = b.upload(&inputs[1])?;
                nccl::group(|g| {
                    let op0 = comms[0].pre_mul_sum(factor::<f32>(0))?;
                    let op1 = comms[1].pre_mul_sum(factor::<f32>(1))?;
                    g.all_reduce_in_place(a, &comms[0], &mut x, &op0)?;
                    g.all_reduce_in_place(b, &comms[1], &mut y, &op1)?;
                    drop((op0, op1));
                    Ok::<_, Error>(())
                })?;
                b.copy_to_host(&y, &mut rest[0])?.wait()?;
                Ok::<_, Error>(())
            })?;
        }
        a.copy_to_host(&x, &mut first[0])?.wait()?;
        Ok::<_, Error>(())
    })?;
    for (r, got) in results.iter().enumerate() {
        check_eq(&format!("grouped pre_mul_sum, device {r}"), &expected, got)?;
    }
    Ok(())
}

/// A communicator of one rank on GPU 0, made for each test that needs one alone.
fn lone_rank(device: &Device) -> stream_core::Result<Communicator> {
    Communicator::join(device, &UniqueId::new()?, 0, 1)
}

/// A capture records an all_reduce with a `PreMulSum` of 0.75, which is then dropped
/// and another of 5 made (in its entry of NCCL's table); each of three replays, on new
/// inputs, gives the input times 0.75.
fn one_dropped_after_a_capture_reduces_at_every_replay() -> TestResult {
    let _one_at_a_time = exclusive();
    const LEN: usize = 4099;
    let device = Device::new(0)?;
    let comm = lone_rank(&device)?;
    let op: PreMulSum<'_, f32> = comm.pre_mul_sum(0.75)?;
    let held = (
        device.alloc_pinned::<f32>(LEN)?,
        device.alloc_pinned::<f32>(LEN)?,
    );
    let (mut graph, ()) = device.capture(held, |g, (x_host, mut y_host)| {
        let x = g.upload(&x_host)?;
        let mut y = g.alloc::<f32>(LEN)?;
        g.all_reduce(&comm, &x, &mut y, &op)?;
        g.copy_to_host(&y, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    drop(op);
    // NCCL reuses the freed entry of the communicator's table for the next one made:
    // the graph keeps the factor it recorded.
    let _another = comm.pre_mul_sum(5.0f32)?;
    let stream = device.new_stream()?;
    for round in 0..3u64 {
        let input = rank_input::<f32>(0x9e_0000 + round, 0, LEN, false);
        {
            let (x, y) = graph.held_mut();
            x.copy_from_slice(&input);
            y.fill(f32::NAN);
        }
        scope(&stream, |s| {
            s.replay_with(&mut graph, &[&comm])?.wait().map(drop)
        })?;
        let expected: Vec<f32> = input.iter().map(|v| v * 0.75).collect();
        check_eq(&format!("replay {round}"), &expected, graph.held().1)?;
    }
    Ok(())
}

/// Two communicators of one rank on GPU 0: a `PreMulSum` of the first, given to the
/// second's all_reduce (a scope's, a group's, a capture's), is
/// `ReductionOfAnotherCommunicator`, and the receive buffer keeps its poison; the
/// second's own works.
fn one_of_another_communicator_is_refused_and_enqueues_nothing() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let (first, second) = (lone_rank(&device)?, lone_rank(&device)?);
    let theirs = first.pre_mul_sum(2.0f32)?;
    let ours = second.pre_mul_sum(3.0f32)?;
    let stream = device.new_stream()?;
    let refused = |result: stream_core::Result<()>, how: &str| -> TestResult {
        ensure!(
            matches!(result, Err(Error::ReductionOfAnotherCommunicator)),
            "{how}: {result:?}"
        );
        Ok(())
    };
    let start = poisoned::<f32>(64);
    let (mut out, mut own) = (poisoned::<f32>(64), poisoned::<f32>(64));
    scope(&stream, |s| {
        let x = s.upload(&[1.0f32; 64])?;
        let mut y = s.upload(&start)?;
        refused(s.all_reduce(&second, &x, &mut y, &theirs), "a scope's")?;
        refused(
            nccl::group(|g| g.all_reduce(s, &second, &x, &mut y, &theirs)),
            "a group's",
        )?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        let mut z = s.alloc::<f32>(64)?;
        s.all_reduce(&second, &x, &mut z, &ours)?;
        s.copy_to_host(&z, &mut own)?.wait()?;
        TestResult::Ok(())
    })?;
    check_eq(
        "the refused calls' receive buffer",
        &poisoned::<f32>(64),
        &out,
    )?;
    check_eq("its own communicator's", &[3.0f32; 64], &own)?;
    let captured = device.capture((), |g, ()| {
        let x = g.alloc_zeroed::<f32>(64)?;
        let mut y = g.alloc::<f32>(64)?;
        g.all_reduce(&second, &x, &mut y, &theirs)
    });
    ensure!(
        matches!(captured, Err(Error::ReductionOfAnotherCommunicator)),
        "a capture's: {:?}",
        captured.map(drop)
    );
    Ok(())
}

/// After `Communicator::abort`: a collective with its `PreMulSum` and a new
/// `pre_mul_sum` are `CommunicatorAborted`; dropping the one made before (NCCL freed
/// it with the communicator) does nothing; a new communicator works.
fn after_an_abort_it_is_refused_and_dropping_it_is_harmless() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = lone_rank(&device)?;
    let op = comm.pre_mul_sum(0.5f64)?;
    let stream = device.new_stream()?;
    reduce_once(&comm, &stream, &op, 0.5)?;
    comm.abort();
    let after = scope(&stream, |s| {
        let mut x = s.alloc_zeroed::<f64>(8)?;
        s.all_reduce_in_place(&comm, &mut x, &op)
    });
    ensure!(
        matches!(after, Err(Error::CommunicatorAborted { .. })),
        "a collective after the abort: {after:?}"
    );
    let again = comm.pre_mul_sum(0.5f64).map(drop);
    ensure!(
        matches!(again, Err(Error::CommunicatorAborted { .. })),
        "pre_mul_sum after the abort: {again:?}"
    );
    drop(op);
    let fresh = lone_rank(&device)?;
    let op = fresh.pre_mul_sum(0.25f64)?;
    reduce_once(&fresh, &stream, &op, 0.25)
}

/// One all_reduce of eight 4s with `op` on `comm`: every element is `4 × factor`.
fn reduce_once(
    comm: &Communicator,
    stream: &Stream,
    op: &PreMulSum<'_, f64>,
    factor: f64,
) -> TestResult {
    let mut got = [0f64; 8];
    scope(stream, |s| {
        let mut x = s.upload(&[4.0f64; 8])?;
        s.all_reduce_in_place(comm, &mut x, op)?;
        s.copy_to_host(&x, &mut got)?.wait()?;
        Ok::<_, Error>(())
    })?;
    check_eq("pre_mul_sum of one rank", &[4.0 * factor; 8], &got)
}
