//! The straggler diagnosis of the pageable case, with `BENCH_STAGING_STRAGGLERS` set:
//! printed only. On some hosts a one-shot 64 MiB memcpy on 16 threads (the case's
//! ceiling row) moved a third of what the same threads sustain over a longer copy (13.8
//! against 39.2 GB/s on one H100 host). A copy split into one stripe per thread lasts as
//! long as its slowest thread, so a thread that starts late or runs slow (a busy or
//! descheduled core) holds up the whole copy, and a staged copy pays that once per
//! chunk. This measures, at 64 MiB each way, the one-shot copy split into one stripe
//! per thread (as the ceiling row did until the library's staged copies took pieces too)
//! against the same copy handed out in 256 KiB pieces that the threads take in turn from
//! a shared counter (a late thread then takes fewer pieces; the ceiling row's split now),
//! and for the stripes: how late the last thread started and how long the
//! slowest and the median thread copied.

use super::host_memcpy::{timed_copy, Span, Split, PIECE_ELEMS};
use crate::env::MIB;
use crate::error::Result;
use crate::raw::RawPinned;
use crate::sampling::spread_text;

/// Rounds, each measuring both splits once per direction.
const ROUNDS: usize = 15;
/// Bytes of each copy.
const BYTES: usize = 64 * MIB;
pub(super) fn run() -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let n = BYTES / 4;
    let mut pageable: Vec<f32> = vec![1.0; n];
    let mut pinned = RawPinned::new(n)?;
    println!(
        "  staging stragglers, 64 MiB on {threads} threads, {ROUNDS} rounds, medians (min, max): one stripe per thread vs {} KiB pieces from a shared counter",
        (PIECE_ELEMS * 4) >> 10
    );
    for up in [true, false] {
        let (mut stripes, mut pieces) = (Vec::new(), Vec::new());
        let (mut late, mut slowest, mut median) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (p, q) = (&mut pageable[..], pinned.as_mut_slice());
            let (dst, src) = match up {
                true => (q, &*p),
                false => (p, &*q),
            };
            let (opened, spans) = timed_copy(dst, src, threads, Split::Stripes)?;
            stripes.push(gbs(&spans));
            let first = spans.iter().map(|s| s.0).min().unwrap_or(opened);
            late.push(
                spans
                    .iter()
                    .map(|s| s.0.duration_since(first))
                    .max()
                    .unwrap_or_default(),
            );
            let mut lengths: Vec<_> = spans.iter().map(|s| s.1.duration_since(s.0)).collect();
            lengths.sort();
            slowest.push(lengths[lengths.len() - 1]);
            median.push(lengths[lengths.len() / 2]);
            let (p, q) = (&mut pageable[..], pinned.as_mut_slice());
            let (dst, src) = match up {
                true => (q, &*p),
                false => (p, &*q),
            };
            pieces.push(gbs(&timed_copy(dst, src, threads, Split::Pieces)?.1));
        }
        let us = |v: &[std::time::Duration]| {
            let micros: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e6).collect();
            format!("{} us", spread_text(&micros, 0))
        };
        println!(
            "  staging stragglers, {}: stripes {} GB/s, pieces {} GB/s; stripes: last thread's start after the first's {}, slowest thread {}, median thread {}",
            if up { "up" } else { "down" },
            spread_text(&stripes, 1),
            spread_text(&pieces, 1),
            us(&late),
            us(&slowest),
            us(&median),
        );
    }
    Ok(())
}

/// GB/s of a 64 MiB copy whose threads ran `spans`.
fn gbs(spans: &[Span]) -> f64 {
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(first), Some(last)) => BYTES as f64 / last.duration_since(first).as_secs_f64() / 1e9,
        _ => f64::NAN,
    }
}
