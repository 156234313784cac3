//! `Communicator::split` and `split_all` (`ncclCommSplit`): the groups of tensor- or
//! pipeline-parallel training made out of one communicator, checked by an all_reduce on
//! each new one against the CPU, and every refusal.
//!
//! On one GPU the communicators have one rank; with two GPUs, one thread per rank
//! (`split`) and one thread driving both (`split_all`). Without a CUDA device these
//! tests are reported as ignored; without NCCL they fail, naming it.

use gpu_tests::nccl_ranks::{devices_of, exclusive, on_ranks, rank_count, streams_of};
use gpu_tests::{check_eq, ensure, TestResult};
use stream_core::nccl::{self, Communicator, Sum, UniqueId};
use stream_core::{scope, Device, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        a_communicator_of_one_rank_splits_and_its_parts_outlive_it,
        ranks_of_one_color_form_a_communicator_in_their_order,
        one_thread_splits_every_device_together,
        splits_that_cannot_complete_are_refused,
    ],
}

/// The all_reduce (Sum, in place) of `rank + 1` over `comm`, from a scope on `stream`.
fn sum_of_ranks(comm: &Communicator, stream: &Stream) -> Result<u32, gpu_tests::Failed> {
    let (input, mut out) = ([comm.rank() as u32 + 1; 5], [0u32; 5]);
    scope(stream, |s| {
        let mut x = s.upload(&input)?;
        s.all_reduce_in_place(comm, &mut x, Sum)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    ensure!(
        out.iter().all(|&v| v == out[0]),
        "uneven all_reduce result {out:?}"
    );
    Ok(out[0])
}

/// `1 + 2 + ... + n`.
fn triangle(n: usize) -> u32 {
    (n * (n + 1) / 2) as u32
}

fn a_communicator_of_one_rank_splits_and_its_parts_outlive_it() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let part = comm.split(Some(3))?.ok_or("a color gave no communicator")?;
    ensure!(
        (part.rank(), part.size(), part.device().ordinal()) == (0, 1, 0),
        "{part:?}"
    );
    ensure!(
        part.timeout() == comm.timeout(),
        "the timeout was not inherited"
    );
    ensure!(comm.split(None)?.is_none(), "no color gave a communicator");
    // The parent aborted: it cannot be split again, and its part goes on.
    comm.abort();
    let err = comm.split(Some(0)).unwrap_err();
    ensure!(
        matches!(err, Error::CommunicatorAborted { .. }),
        "split after abort: {err}"
    );
    check_eq(
        "all_reduce on the part",
        &[1],
        &[sum_of_ranks(&part, &stream)?],
    )
}

/// One thread per rank over every GPU (at most 2): one color for all (the same
/// communicator again, in the same order), one color per rank (communicators of one),
/// and rank 0 without a color.
fn ranks_of_one_color_form_a_communicator_in_their_order() -> TestResult {
    let ranks = rank_count()?.min(2);
    on_ranks(ranks, |rank, comm, stream| {
        let all = comm.split(Some(0))?.ok_or("no communicator for color 0")?;
        ensure!(
            (all.rank(), all.size()) == (rank, ranks),
            "one color: rank {} of {}",
            all.rank(),
            all.size()
        );
        check_eq(
            "all_reduce over one color",
            &[triangle(ranks)],
            &[sum_of_ranks(&all, stream)?],
        )?;
        let alone = comm.split(Some(rank as u16))?.ok_or("no communicator")?;
        ensure!(alone.size() == 1 && alone.rank() == 0, "{alone:?}");
        check_eq("all_reduce alone", &[1], &[sum_of_ranks(&alone, stream)?])?;
        let rest = comm.split((rank > 0).then_some(9))?;
        match rest {
            None => ensure!(rank == 0, "rank {rank} got no communicator"),
            Some(rest) => {
                ensure!(
                    rank > 0 && (rest.rank(), rest.size()) == (rank - 1, ranks - 1),
                    "rank {rank}: {rest:?}"
                );
                check_eq(
                    "all_reduce over the ranks after 0",
                    &[triangle(ranks - 1)],
                    &[sum_of_ranks(&rest, stream)?],
                )?;
            }
        }
        Ok(())
    })
}

/// `split_all` over `for_devices`' communicators (every GPU, at most 2): one color for
/// all gives a communicator this thread drives (grouped collectives only, when it has
/// siblings), a color each gives communicators of one rank (ungrouped again).
fn one_thread_splits_every_device_together() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let streams = streams_of(&devices)?;
    let comms = Communicator::for_devices(&devices)?;
    let together = Communicator::split_all(&comms, &vec![Some(7); ranks])?
        .into_iter()
        .collect::<Option<Vec<Communicator>>>()
        .ok_or("a member got no communicator")?;
    for (r, c) in together.iter().enumerate() {
        ensure!(
            (c.rank(), c.size(), c.device().ordinal()) == (r, ranks, r),
            "{c:?}"
        );
    }
    let mut sums = vec![[0u32; 1]; ranks];
    if ranks == 1 {
        sums[0] = [sum_of_ranks(&together[0], &streams[0])?];
    } else {
        let (first, rest) = sums.split_at_mut(1);
        scope(&streams[0], |a| {
            scope(&streams[1], |b| {
                let mut x = a.upload(&[1u32])?;
                let mut y = b.upload(&[2u32])?;
                let ungrouped = a
                    .all_reduce_in_place(&together[0], &mut x, Sum)
                    .unwrap_err();
                ensure!(
                    matches!(ungrouped, Error::NcclGroup { .. }),
                    "an ungrouped collective of a split driven by one thread: {ungrouped}"
                );
                nccl::group(|g| {
                    g.all_reduce_in_place(a, &together[0], &mut x, Sum)?;
                    g.all_reduce_in_place(b, &together[1], &mut y, Sum)
                })?;
                a.copy_to_host(&x, &mut first[0])?.wait()?;
                b.copy_to_host(&y, &mut rest[0])?.wait()?;
                Ok::<_, gpu_tests::Failed>(())
            })
        })?;
    }
    for (r, got) in sums.iter().enumerate() {
        check_eq(
            &format!("grouped all_reduce over the split, rank {r}"),
            &[triangle(ranks)],
            got,
        )?;
    }
    let colors: Vec<Option<u16>> = (0..ranks as u16).map(Some).collect();
    let alone = Communicator::split_all(&comms, &colors)?;
    for (r, c) in alone.iter().enumerate() {
        let c = c.as_ref().ok_or("a color gave no communicator")?;
        ensure!(c.size() == 1, "{c:?}");
        check_eq(
            "all_reduce alone, ungrouped",
            &[1],
            &[sum_of_ranks(c, &streams[r])?],
        )?;
    }
    Ok(())
}

/// Splits refused before NCCL is called: a wrong number of colors, a member of
/// `for_devices` with siblings split alone, members of another communicator or not all
/// of one, and a split inside `nccl::group`.
fn splits_that_cannot_complete_are_refused() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let err = Communicator::split_all(&comms, &[]).unwrap_err();
    ensure!(matches!(err, Error::LengthMismatch(_)), "no colors: {err}");
    let err = Communicator::split_all(&[], &[]).unwrap_err();
    ensure!(
        matches!(err, Error::InvalidRank { .. }),
        "no members: {err}"
    );
    let err = nccl::group(|_| comms[0].split(Some(0))).unwrap_err();
    ensure!(
        matches!(err, Error::NcclGroup { .. }),
        "a split inside a group: {err}"
    );
    let other = Communicator::join(&devices[0], &UniqueId::new()?, 0, 1)?;
    if ranks == 1 {
        // A member of another communicator of the same shape.
        let err = Communicator::split_all(std::slice::from_ref(&other), &[Some(0)]);
        ensure!(err.is_ok(), "a whole communicator of one: {:?}", err.err());
        return Ok(());
    }
    let err = comms[0].split(Some(0)).unwrap_err();
    ensure!(
        matches!(err, Error::NcclGroup { .. }),
        "a sibling split alone: {err}"
    );
    let err = Communicator::split_all(&comms[..1], &[Some(0)]).unwrap_err();
    ensure!(
        matches!(err, Error::NcclGroup { .. }),
        "half the members: {err}"
    );
    let mixed = [
        other,
        Communicator::join(&devices[1], &UniqueId::new()?, 0, 1)?,
    ];
    let err = Communicator::split_all(&mixed, &[Some(0), Some(0)]).unwrap_err();
    ensure!(
        matches!(err, Error::NcclGroup { .. }),
        "members of two communicators: {err}"
    );
    Ok(())
}
