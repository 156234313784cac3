//! A pre-multiplied sum whose factor stays on the GPU (`Scope::all_reduce_scaled` and its
//! kin, NCCL's `ncclScalarDevice`): each rank's factor computed by a kernel on the
//! scope's stream, never seen by the host, scales that rank's contribution, out of place
//! and in place, for all_reduce, reduce and reduce_scatter, compared bit for bit with the CPU
//! (factors and inputs chosen so every product and sum is exact); a kernel that
//! overwrites the factor after the call does not change the result (the collective
//! reads it in stream order); a factor of two elements is `ShapeMismatch` and enqueues
//! nothing; inside a group (borrowed until the group's end), and in a capture whose
//! replays read the factor of the moment (uploaded from the graph's pinned memory at
//! each replay).
//!
//! The ranks are every visible GPU, one thread each; on one GPU, a communicator of one
//! rank.

use gpu_tests::nccl_ranks::{exclusive, on_ranks, rank_count, rank_input};
use gpu_tests::{check_eq, ensure, poisoned, Rng, TestResult};
use stream_core::nccl::{self, Communicator, UniqueId};
use stream_core::{scope, Device, Error};

gpu_tests::test_main! {
    gpu: [
        a_factor_computed_on_the_gpu_scales_each_ranks_contribution,
        a_factor_of_two_elements_is_refused_and_enqueues_nothing,
        a_group_reduces_with_factors_borrowed_until_its_end,
        a_capture_reads_the_factor_of_the_moment_at_each_replay,
    ],
}

/// Rank `rank`'s factor, `(rank + 1) / 4`: exact in `f32`, as are its products with the
/// inputs (integers at most 4 in magnitude) and their sums.
fn factor(rank: usize) -> f32 {
    (rank + 1) as f32 / 4.0
}

/// `Σ_r factors[r] × inputs[r]`, element-wise (in `f64`: exact for these values).
fn scaled_sum(inputs: &[Vec<f32>], factors: &[f32]) -> Vec<f32> {
    (0..inputs[0].len())
        .map(|i| {
            let total: f64 = inputs
                .iter()
                .zip(factors)
                .map(|(x, &f)| f64::from(f) * f64::from(x[i]))
                .sum();
            total as f32
        })
        .collect()
}

/// all_reduce, reduce (to the last rank) and reduce_scatter scaled, out of place and in
/// place, at 1, 1001 and
/// 1 Mi elements per rank, each rank's factor made on the GPU (`2 × factor / 2`, by the
/// `scale` kernel) and overwritten by a fill right after the last collective: the
/// results are the CPU's with the factor as it was when each collective was issued.
fn a_factor_computed_on_the_gpu_scales_each_ranks_contribution() -> TestResult {
    let seed = Rng::new().next_u64();
    let ranks = rank_count()?;
    let factors: Vec<f32> = (0..ranks).map(factor).collect();
    let cases: Vec<_> = [1usize, 1001, 1 << 20]
        .into_iter()
        .map(|count| {
            let inputs: Vec<Vec<f32>> = (0..ranks)
                .map(|r| rank_input(seed ^ count as u64, r, count, false))
                .collect();
            let wide: Vec<Vec<f32>> = (0..ranks)
                .map(|r| rank_input(seed ^ 0xFAC7 ^ count as u64, r, count * ranks, false))
                .collect();
            let (sum, wide_sum) = (scaled_sum(&inputs, &factors), scaled_sum(&wide, &factors));
            (count, inputs, sum, wide, wide_sum)
        })
        .collect();
    on_ranks(ranks, |rank, comm, stream| {
        let doubled_factor = [2.0 * factor(rank)];
        for (count, inputs, sum, wide, wide_sum) in &cases {
            let count = *count;
            let root = ranks - 1;
            let mut got = [0, 1, 2, 3, 4, 5].map(|_| poisoned::<f32>(count));
            let [out, in_place, scattered, scattered_in_place, reduced, reduced_in_place] =
                &mut got;
            scope(stream, |s| {
                let doubled = s.upload(&doubled_factor)?;
                let mut f = s.alloc::<f32>(1)?;
                kernels::scale(s, 0.5, &doubled, &mut f)?; // the factor, made on the GPU
                let (x, w) = (s.upload(&inputs[rank])?, s.upload(&wide[rank])?);
                let (mut y, mut z) = (s.alloc::<f32>(count)?, s.upload(&inputs[rank])?);
                let (mut u, mut v) = (s.alloc::<f32>(count)?, s.upload(&wide[rank])?);
                let (mut r, mut q) = (s.alloc::<f32>(count)?, s.upload(&inputs[rank])?);
                s.fill(&mut y, f32::NAN)?;
                s.fill(&mut u, f32::NAN)?;
                s.all_reduce_scaled(comm, &x, &mut y, &f)?;
                s.all_reduce_scaled_in_place(comm, &mut z, &f)?;
                s.reduce_scatter_scaled(comm, &w, &mut u, &f)?;
                s.reduce_scatter_scaled_in_place(comm, &mut v, &f)?;
                s.reduce_scaled(comm, &x, &mut r, &f, root)?;
                s.reduce_scaled_in_place(comm, &mut q, &f, root)?;
                // Ordered after every collective above on the stream: none sees it.
                s.fill(&mut f, 1000.0)?;
                s.copy_to_host(&y, out)?.wait()?;
                s.copy_to_host(&z, in_place)?.wait()?;
                s.copy_to_host(&u, scattered)?.wait()?;
                let mine = v.slice(rank * count..(rank + 1) * count)?;
                s.copy_to_host(&mine, scattered_in_place)?.wait()?;
                s.copy_to_host(&r, reduced)?.wait()?;
                s.copy_to_host(&q, reduced_in_place)?.wait()?;
                Ok::<_, Error>(())
            })?;
            let block = &wide_sum[rank * count..(rank + 1) * count];
            check_eq(&format!("all_reduce_scaled of {count}"), sum, out)?;
            check_eq(
                &format!("all_reduce_scaled_in_place of {count}"),
                sum,
                in_place,
            )?;
            check_eq(
                &format!("reduce_scatter_scaled of {count}"),
                block,
                scattered,
            )?;
            let what = format!("reduce_scatter_scaled_in_place of {count}");
            check_eq(&what, block, scattered_in_place)?;
            if rank == root {
                check_eq(&format!("reduce_scaled of {count}"), sum, reduced)?;
                let what = format!("reduce_scaled_in_place of {count}");
                check_eq(&what, sum, reduced_in_place)?;
            }
        }
        Ok(())
    })
}

/// A communicator of one rank on GPU 0, for the tests that need one alone.
fn lone_rank(device: &Device) -> stream_core::Result<Communicator> {
    Communicator::join(device, &UniqueId::new()?, 0, 1)
}

/// A factor of two elements: `ShapeMismatch` naming the factor, for each method, and the
/// output keeps its poison (nothing was enqueued); the communicator then reduces as usual.
fn a_factor_of_two_elements_is_refused_and_enqueues_nothing() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = lone_rank(&device)?;
    let stream = device.new_stream()?;
    let (mut refused_out, mut out) = (vec![0f32; 64], vec![0f32; 64]);
    scope(&stream, |s| {
        let two = s.upload(&[0.5f32, 0.5])?;
        let x = s.upload(&[3.0f32; 64])?;
        let mut y = s.upload(&[f32::NAN; 64])?;
        let refusals = [
            s.all_reduce_scaled(&comm, &x, &mut y, &two),
            s.all_reduce_scaled_in_place(&comm, &mut y, &two),
            s.reduce_scatter_scaled(&comm, &x, &mut y, &two),
            s.reduce_scatter_scaled_in_place(&comm, &mut y, &two),
            s.reduce_scaled(&comm, &x, &mut y, &two, 0),
            s.reduce_scaled_in_place(&comm, &mut y, &two, 0),
        ];
        for refused in refusals {
            ensure!(
                matches!(&refused, Err(e @ Error::ShapeMismatch(_)) if e.to_string().contains("factor")),
                "a factor of two elements: {refused:?}"
            );
        }
        let seen = s.copy_to_host(&y, &mut refused_out)?.wait()?;
        ensure!(seen.iter().all(|v| v.is_nan()), "the output was written");
        let one = two.slice(..1)?;
        s.all_reduce_scaled(&comm, &x, &mut y, &one)?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok::<_, gpu_tests::Failed>(())
    })?;
    check_eq(
        "all_reduce_scaled after the refusals",
        &vec![1.5f32; 64],
        &out,
    )
}

/// Inside `nccl::group`, the factor is borrowed until the group's end, when NCCL enqueues
/// the collective (the reduction itself is destroyed right after the call, as NCCL
/// allows): the result is the input times the factor.
fn a_group_reduces_with_factors_borrowed_until_its_end() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = lone_rank(&device)?;
    let stream = device.new_stream()?;
    let input: Vec<f32> = rank_input(Rng::new().next_u64(), 0, 4099, false);
    let (mut out, mut in_place) = (poisoned::<f32>(4099), poisoned::<f32>(4099));
    scope(&stream, |s| {
        let f = s.upload(&[0.75f32])?;
        let x = s.upload(&input)?;
        let (mut y, mut z) = (s.alloc::<f32>(4099)?, s.upload(&input)?);
        nccl::group(|g| {
            g.all_reduce_scaled(s, &comm, &x, &mut y, &f)?;
            g.all_reduce_scaled_in_place(s, &comm, &mut z, &f)
        })?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        s.copy_to_host(&z, &mut in_place)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let expected = scaled_sum(&[input], &[0.75]);
    check_eq("a group's all_reduce_scaled", &expected, &out)?;
    check_eq("a group's all_reduce_scaled_in_place", &expected, &in_place)
}

/// A capture uploads its factor from the graph's pinned memory, then reduces with it:
/// each replay, with a new factor and a new input written there first, gives that
/// input times that factor (the GPU reads the factor when the collective runs).
fn a_capture_reads_the_factor_of_the_moment_at_each_replay() -> TestResult {
    let _one_at_a_time = exclusive();
    const LEN: usize = 4099;
    let device = Device::new(0)?;
    let comm = lone_rank(&device)?;
    let stream = device.new_stream()?;
    let held = (
        device.alloc_pinned::<f32>(1)?,
        device.alloc_pinned::<f32>(LEN)?,
        device.alloc_pinned::<f32>(LEN)?,
    );
    let (mut graph, ()) = device.capture(held, |g, (f_host, x_host, mut y_host)| {
        let f = g.upload(&f_host)?;
        let mut x = g.upload(&x_host)?;
        g.all_reduce_scaled_in_place(&comm, &mut x, &f)?;
        g.copy_to_host(&x, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    let seed = Rng::new().next_u64();
    for (round, factor) in [0.5f32, 1.25, -2.0].into_iter().enumerate() {
        let input: Vec<f32> = rank_input(seed ^ round as u64, 0, LEN, false);
        {
            let (f, x, y) = graph.held_mut();
            f[0] = factor;
            x.copy_from_slice(&input);
            y.fill(f32::NAN);
        }
        scope(&stream, |s| {
            s.replay_with(&mut graph, &[&comm])?.wait().map(drop)
        })?;
        let expected = scaled_sum(&[input], &[factor]);
        check_eq(
            &format!("replay {round}, factor {factor}"),
            &expected,
            graph.held().2,
        )?;
    }
    Ok(())
}
