//! Helpers of the NCCL tests: one thread per rank over every visible GPU (or one rank
//! on one GPU), each with its own [`Communicator`] joined through a shared
//! [`UniqueId`], and [`NcclValue`], the element types with the small integer values
//! whose sums, products and averages over a few ranks are exact, so every result is
//! compared bit for bit with a CPU reference.

use std::sync::{Mutex, MutexGuard, PoisonError};

use libtest_mimic::Failed;
use stream_core::nccl::Sum;
use stream_core::nccl::{Communicator, NcclElement, UniqueId};
use stream_core::{scope, Device, Error, Stream};

use crate::{Element, TestResult};

/// An element type of the NCCL tests.
pub trait NcclValue: NcclElement + Element + Send + Sync {
    /// `true` for `f32`/`f64`, the types `Avg` reduces.
    const FLOAT: bool;
    /// The value `k`, a small integer (`-4..=4`; unsigned types take `|k|`).
    fn small(k: i64) -> Self;
    /// The value as an `f64` (exact for the values the tests use).
    fn to_f64(self) -> f64;
    /// `v`, an exact small number, as this type.
    fn from_f64(v: f64) -> Self;
}

macro_rules! nccl_value {
    ($($t:ty: $float:expr, $signed:expr);* $(;)?) => {$(
        impl NcclValue for $t {
            const FLOAT: bool = $float;
            fn small(k: i64) -> Self {
                (if $signed { k } else { k.abs() }) as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    )*};
}
nccl_value!(
    f32: true, true; f64: true, true; i8: false, true; u8: false, false;
    i32: false, true; u32: false, false; i64: false, true; u64: false, false;
);

macro_rules! half_value {
    ($($t:ty),*) => {$(
        impl NcclValue for $t {
            const FLOAT: bool = true;
            fn small(k: i64) -> Self {
                <$t>::from_f64(k as f64)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
        }
    )*};
}
half_value!(half::f16, half::bf16);

/// The ranks the tests run: every visible GPU, at most 8 (one rank on one GPU).
pub fn rank_count() -> Result<usize, Failed> {
    let n = Device::count().map_err(|e| Failed::from(format!("Device::count: {e}")))?;
    Ok(n.min(8))
}

/// Devices `0..ranks`: the ranks of a test that drives every device from one thread.
pub fn devices_of(ranks: usize) -> stream_core::Result<Vec<Device>> {
    (0..ranks).map(Device::new).collect()
}

/// A new stream on each of `devices`.
pub fn streams_of(devices: &[Device]) -> stream_core::Result<Vec<Stream>> {
    devices.iter().map(Device::new_stream).collect()
}

/// Holds the NCCL tests of this process one at a time: communicators used at once on
/// the same GPUs can deadlock (each GPU may run one communicator's kernel while its
/// peer runs the other's, NCCL's user guide warns), so tests of several ranks, and
/// those that start processes of several ranks, take this first.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `body(rank, communicator, stream)` on `ranks` threads, rank `r` on GPU `r`,
/// with communicators joined through one [`UniqueId`], holding [`exclusive`]; the first failure, naming its
/// rank. A failing rank aborts its communicator so the others do not wait for it
/// forever.
pub fn on_ranks(
    ranks: usize,
    body: impl Fn(usize, &Communicator, &Stream) -> Result<(), Failed> + Sync,
) -> Result<(), Failed> {
    on_ranks_joined_by(ranks, Communicator::join, body)
}

/// [`on_ranks`] with the communicators made by `join(device, id, rank, size)` instead
/// of `Communicator::join`.
pub fn on_ranks_joined_by(
    ranks: usize,
    join: impl Fn(&Device, &UniqueId, usize, usize) -> stream_core::Result<Communicator> + Sync,
    body: impl Fn(usize, &Communicator, &Stream) -> Result<(), Failed> + Sync,
) -> Result<(), Failed> {
    let _one_at_a_time = exclusive();
    let id = UniqueId::new().map_err(|e| Failed::from(format!("UniqueId::new: {e}")))?;
    let results: Vec<Result<(), Failed>> = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let (body, join) = (&body, &join);
                threads.spawn(move || -> Result<(), Failed> {
                    let device = Device::new(rank)?;
                    let comm = join(&device, &id, rank, ranks)?;
                    // A rank whose check fails stops issuing collectives; its peers'
                    // next one then waits for it until this timeout (NCCL does not
                    // tell a peer on the same host that another rank aborted), so keep
                    // it short enough for the failure to be reported.
                    comm.set_timeout(std::time::Duration::from_secs(20));
                    let stream = device.new_stream()?;
                    let out = body(rank, &comm, &stream);
                    if out.is_err() {
                        comm.abort();
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failed::from("a rank's thread panicked")))
            })
            .collect()
    });
    for (rank, result) in results.into_iter().enumerate() {
        result.map_err(|e| {
            Failed::from(format!(
                "rank {rank} of {ranks}: {}",
                e.message().unwrap_or("failed")
            ))
        })?;
    }
    Ok(())
}

/// Rank `rank`'s input of `len` elements for the test seeded `seed`: small non-zero
/// values (`1..=4` in magnitude, or `1..=2` when `for_products`, so a product over up to
/// 6 ranks stays exact in `i8`), the same on every rank that computes it.
pub fn rank_input<T: NcclValue>(seed: u64, rank: usize, len: usize, for_products: bool) -> Vec<T> {
    (0..len)
        .map(|i| {
            let mut h = seed
                ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
            h ^= h >> 29;
            h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            h ^= h >> 32;
            let magnitude = if for_products {
                1 + (h % 2)
            } else {
                1 + (h % 4)
            } as i64;
            let sign = if (h >> 8) & 1 == 1 { -1 } else { 1 };
            T::small(sign * magnitude)
        })
        .collect()
}

/// The variant's name of an NCCL-related error, for a child's `key = value` lines.
pub fn error_variant(e: &stream_core::Error) -> &'static str {
    use stream_core::Error;
    match e {
        Error::CollectiveTimedOut { .. } => "CollectiveTimedOut",
        Error::JoinTimedOut { .. } => "JoinTimedOut",
        Error::Nccl(_) => "Nccl",
        Error::CommunicatorAborted { .. } => "CommunicatorAborted",
        Error::GraphCommunicators { .. } => "GraphCommunicators",
        Error::RanksDisagree(_) => "RanksDisagree",
        Error::LengthMismatch(_) => "LengthMismatch",
        _ => "other",
    }
}

/// `ok`, or the [`error_variant`] of `result`'s error: what a child prints of a call.
pub fn variant_or_ok<T>(result: &stream_core::Result<T>) -> &'static str {
    result.as_ref().err().map_or("ok", error_variant)
}

/// Both ranks of a two-GPU communicator joined from two threads.
pub fn two_ranks(d0: &Device, d1: &Device) -> Result<(Communicator, Communicator), Failed> {
    let id = UniqueId::new()?;
    let (c0, c1) = std::thread::scope(|t| {
        let one = t.spawn(|| Communicator::join(d1, &id, 1, 2));
        let zero = Communicator::join(d0, &id, 0, 2);
        (zero, one.join())
    });
    Ok((c0?, c1.map_err(|_| "rank 1's join panicked")??))
}

/// One all_reduce on both ranks (from two threads), so NCCL has set up the
/// connections and a later collective goes straight onto the GPU.
pub fn warm_up(
    pair: (Communicator, Communicator),
    devices: (&Device, &Device),
) -> Result<(Communicator, Communicator), Failed> {
    let on = |comm: &Communicator, device: &Device| -> TestResult {
        let stream = device.new_stream()?;
        scope(&stream, |s| {
            let mut x = s.upload(&[1u32; 256])?;
            s.all_reduce_in_place(comm, &mut x, Sum)
        })?;
        Ok(())
    };
    let (zero, one) = pair;
    std::thread::scope(|t| {
        // A communicator is `Send`, not `Sync`: rank 1's moves to its thread and back.
        let handle = t.spawn(move || on(&one, devices.1).map(|()| one));
        on(&zero, devices.0)?;
        let one = handle.join().map_err(|_| "rank 1 panicked")??;
        Ok((zero, one))
    })
}

/// Whether a round trip on `stream` (256 values up and back) comes back whole; the
/// scope's error if it fails.
pub fn still_copies(stream: &Stream) -> Result<bool, Error> {
    let (input, mut back) = ([5u32; 256], [0u32; 256]);
    scope(stream, |s| {
        let x = s.upload(&input)?;
        s.copy_to_host(&x, &mut back)?.wait()?;
        Ok::<_, Error>(())
    })?;
    Ok(back == input)
}

/// A round trip on `stream` after the communicators were aborted, printed as
/// `device_still_works = true` when it came back whole.
pub fn print_whether_the_device_still_works(stream: &Stream) -> TestResult {
    println!("device_still_works = {}", still_copies(stream)?);
    Ok(())
}
