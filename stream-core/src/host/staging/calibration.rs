//! Calibration of staged copies: once per process, at the first staged copy, the host
//! half of the real pipelines ([`upload_pipeline`], [`download_pipeline`]) is timed with
//! a few settings around the machine's rules, within a time budget, and the fastest is
//! kept for the process.
//!
//! # Why the host half only
//!
//! A staged copy moves at about the smaller of its host memcpy and its DMA, and the
//! memcpy is the slower one on most hosts measured (one thread 9-15 GB/s, a DMA 50+;
//! `bench --case pageable` prints both). Not on all: on a 2x H200 host (2026-11-26) the
//! host half with 16 threads reached 55.5 GB/s up, as fast as the DMA, while the staged
//! 64 MiB upload as a whole ran at 22 GB/s, so what these trials tune is the host half,
//! not how it composes with the DMA. How fast the memcpy runs with how many threads,
//! how large a chunk, and whether downloads write with streaming stores varies between
//! hosts by tens of percent (the sweeps behind [`StagingConfig::for_cores`] disagreed
//! between two H100 hosts), which rules from the core count cannot see. The ring depth
//! is left as it is: it only has to keep a block free while the DMA of the others runs,
//! and a DMA several times faster than the memcpy frees each block long before it is
//! needed again; what it would change is a GPU-side effect these trials cannot see.
//!
//! So the trials run the pipelines with a DMA engine that does nothing
//! ([`HostOnly`]): ring blocks are plain pre-touched memory, as fast to write as pinned
//! blocks (page-locking changes who may DMA, not the memory's speed). No device, no
//! driver call: the trials run anywhere, and the unit tests run them.
//!
//! # What is tried, and for how long
//!
//! The rules' setting first (so a result exists however short the budget), then half
//! and a quarter of its threads, and twice its chunk (never a smaller one: see
//! `candidates`), each both ways; downloads with and without streaming stores. Each candidate runs [`TRIAL_BYTES`] per direction,
//! in [`ROUNDS`] rounds interleaved with the others, and keeps its best round (the
//! least disturbed). A candidate is kept only when it beats the rules' setting by
//! [`MIN_GAIN`], so noise does not move the setting. Trials stop starting after
//! [`BUDGET`]: measured on a 2-core machine (release build), all 7 candidates of the
//! earlier list (with half chunks) in 0.28 s; a 16-core host copies several times faster,
//! and plans at most 7. The trials hold
//! [`TRIAL_BYTES`] of source and a ring of the largest chunk tried (at most 128 MiB on a
//! 16-core host) for that time, then free them.
//!
//! An unoptimised build (`debug_assertions`) does not calibrate unless told to.
//!
//! Users who want no calibration, or a fixed setting, set `STREAM_CORE_STAGING_CALIBRATE=0`,
//! or pin one with [`set_staging_config`](super::config::set_staging_config) and
//! [`set_streaming_stores`](super::stripe::set_streaming_stores) before their first
//! copy; [`calibrate_staging`] runs it eagerly (at startup, say), and
//! [`staging_calibration`] says what it measured.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::config::{StagingConfig, DEFAULT_CHUNK};
use super::pipeline::{download_pipeline, upload_pipeline, Dma};
use crate::error::Result;

/// Bytes each trial copies per direction.
pub const TRIAL_BYTES: usize = 64 << 20;
/// Rounds over the candidates (each keeps its best).
const ROUNDS: usize = 2;
/// Trials stop starting after this long.
pub const BUDGET: Duration = Duration::from_millis(250);
/// How much faster (as a ratio of the harmonic mean of both ways) a candidate must be
/// than the rules' setting to replace it.
const MIN_GAIN: f64 = 1.05;
/// The environment variable that turns calibration off (`0`, `off`, `no`, `false`).
pub const CALIBRATE_ENV: &str = "STREAM_CORE_STAGING_CALIBRATE";

/// What the calibration measured and chose (see [`staging_calibration`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StagingCalibration {
    /// Threads and chunk size chosen (the rest as the rules set it).
    pub config: StagingConfig,
    /// Whether downloads write their destination with streaming stores.
    pub streaming_downloads: bool,
    /// Host-half GB/s of the chosen setting: uploads, downloads.
    pub chosen_gbs: (f64, f64),
    /// Host-half GB/s of the rules' setting: uploads, downloads.
    pub rules_gbs: (f64, f64),
    /// Candidates measured (of those planned) before the budget ran out.
    pub measured: usize,
    /// Candidates planned.
    pub planned: usize,
    /// How long it took.
    pub took: Duration,
}

/// One setting tried.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    threads: usize,
    chunk_bytes: usize,
    streaming_downloads: bool,
    /// Best GB/s so far: uploads, downloads (0 before the first trial).
    best: (f64, f64),
}

impl Candidate {
    /// Harmonic mean of both ways: a copy server moves both, and a setting fast one way
    /// only does not win.
    fn score(&self) -> f64 {
        let (up, down) = self.best;
        if up <= 0.0 || down <= 0.0 {
            return 0.0;
        }
        2.0 / (1.0 / up + 1.0 / down)
    }
}

/// The candidates around `rules` (the rules' own first), without repeats.
///
/// No chunk smaller than the rules' is tried. The host half alone favours small chunks
/// because a small ring stays in the cache (on a 2x H100 host, 2026-11-26, 4 MiB chunks
/// copied 82-97 GB/s up against 39-53 with the rules' 8 MiB, and two of four calibrations
/// chose them), but cached blocks are what slows the DMA that reads or writes them next:
/// staged 64 MiB copies with 4 MiB chunks and 16 threads moved 23-27 GB/s up and 21-24
/// down against 31-42 and 35-38 with 8 MiB (`BENCH_STAGING_TRACE`).
fn candidates(rules: StagingConfig, rules_streaming: bool) -> Vec<Candidate> {
    let threads = [rules.threads, rules.threads / 2, rules.threads / 4];
    let chunks = [rules.chunk_bytes, rules.chunk_bytes * 2];
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |threads: usize, chunk_bytes: usize, streaming_downloads: bool| {
        let c = Candidate {
            threads: threads.max(1),
            chunk_bytes: chunk_bytes.max(DEFAULT_CHUNK / 4),
            streaming_downloads,
            best: (0.0, 0.0),
        };
        let seen = out.iter().any(|o| {
            (o.threads, o.chunk_bytes, o.streaming_downloads)
                == (c.threads, c.chunk_bytes, c.streaming_downloads)
        });
        if !seen {
            out.push(c);
        }
    };
    push(rules.threads, rules.chunk_bytes, rules_streaming);
    push(rules.threads, rules.chunk_bytes, !rules_streaming);
    for t in threads {
        for c in chunks {
            push(t, c, rules_streaming);
        }
    }
    out
}

/// `len` bytes of `byte`, or [`Error::HostOutOfMemory`](crate::Error::HostOutOfMemory).
fn filled(len: usize, byte: u8) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| crate::error::Error::HostOutOfMemory { requested: len })?;
    v.resize(len, byte);
    Ok(v)
}

/// A DMA engine that moves nothing: ring blocks are plain memory, touched once.
struct HostOnly {
    blocks: Vec<Vec<u8>>,
}

impl Dma for HostOnly {
    fn idle_block(&mut self, slot: usize) -> Result<&mut [u8]> {
        let count = self.blocks.len();
        Ok(&mut self.blocks[slot % count])
    }

    fn to_device(&mut self, _slot: usize, _offset: usize, _len: usize) -> Result<()> {
        Ok(())
    }

    fn to_host(&mut self, _slot: usize, _offset: usize, _len: usize) -> Result<()> {
        Ok(())
    }
}

/// Runs the calibration around `rules` (downloads streaming per `rules_streaming`),
/// copying `bytes` per trial, starting no trial after `budget`.
pub(crate) fn calibrate_around(
    rules: StagingConfig,
    rules_streaming: bool,
    bytes: usize,
    budget: Duration,
) -> Result<StagingCalibration> {
    let start = Instant::now();
    let rules = rules.effective();
    let mut list = candidates(rules, rules_streaming);
    let largest_chunk = list
        .iter()
        .map(|c| c.chunk_bytes)
        .max()
        .unwrap_or(rules.chunk_bytes);
    // Pre-touched, so that page faults are not measured (the user's memory in a real
    // copy is usually touched, and pool blocks always are). Allocated fallibly: on a
    // host short of memory the calibration fails (copies then use the rules) instead of
    // aborting the process in the middle of a user's first copy.
    let mut user = filled(bytes, 0x5A)?;
    let mut engine = HostOnly {
        blocks: (0..rules.ring_blocks.max(1))
            .map(|_| filled(largest_chunk, 0xA5))
            .collect::<Result<_>>()?,
    };
    let mut measured = 0;
    'rounds: for round in 0..ROUNDS {
        for candidate in list.iter_mut() {
            if start.elapsed() > budget && measured > 0 {
                break 'rounds;
            }
            let config = StagingConfig {
                threads: candidate.threads,
                chunk_bytes: candidate.chunk_bytes,
                ..rules
            };
            let t = Instant::now();
            upload_pipeline(&mut engine, &user, config, 0)?;
            let up = bytes as f64 / t.elapsed().as_nanos().max(1) as f64;
            let t = Instant::now();
            download_pipeline(
                &mut engine,
                &mut user,
                config,
                candidate.streaming_downloads,
            )?;
            let down = bytes as f64 / t.elapsed().as_nanos().max(1) as f64;
            candidate.best = (candidate.best.0.max(up), candidate.best.1.max(down));
            if round == 0 {
                measured += 1;
            }
        }
    }
    let rules_result = list[0];
    let best = list[..measured]
        .iter()
        .copied()
        .max_by(|a, b| a.score().total_cmp(&b.score()))
        .unwrap_or(rules_result);
    let chosen = if best.score() >= rules_result.score() * MIN_GAIN {
        best
    } else {
        rules_result
    };
    Ok(StagingCalibration {
        config: StagingConfig {
            threads: chosen.threads,
            chunk_bytes: chosen.chunk_bytes,
            ..rules
        },
        streaming_downloads: chosen.streaming_downloads,
        chosen_gbs: chosen.best,
        rules_gbs: rules_result.best,
        measured,
        planned: list.len(),
        took: start.elapsed(),
    })
}

/// Whether to calibrate: `STREAM_CORE_STAGING_CALIBRATE` says (`0`/`off`/`no`/`false`,
/// or `1`/`on`/`yes`/`true`); unset, an optimised build calibrates and an unoptimised
/// one does not (its memcpy loops, unoptimised, say nothing about the release build's:
/// measured, 0.12 GB/s for streaming stores in a debug build against 14 in release).
fn enabled() -> bool {
    match std::env::var(CALIBRATE_ENV).as_deref().map(str::trim) {
        Ok("0" | "off" | "no" | "false") => false,
        Ok("1" | "on" | "yes" | "true") => true,
        _ => !cfg!(debug_assertions),
    }
}

/// The process's calibration: `None` when turned off or when it failed (copies then use
/// the rules).
static CALIBRATION: OnceLock<Option<StagingCalibration>> = OnceLock::new();

/// Runs the calibration now if it has not run (see [`staging`](crate::staging)), and
/// returns what it chose; `None` when `STREAM_CORE_STAGING_CALIBRATE=0` turned it off.
/// Staged copies run it on their own at the first staged copy; call this at startup to
/// keep that time off the first copy.
pub fn calibrate_staging() -> Option<StagingCalibration> {
    CALIBRATION
        .get_or_init(|| {
            if !enabled() {
                return None;
            }
            let rules = StagingConfig::for_this_machine();
            let streaming = super::stripe::StreamingStores::DownloadsAndUploadTails.for_downloads();
            calibrate_around(rules, streaming, TRIAL_BYTES, BUDGET).ok()
        })
        .clone()
}

/// What the calibration chose, if it has run (`None` before the first staged copy, or
/// when it is turned off).
pub fn staging_calibration() -> Option<StagingCalibration> {
    CALIBRATION.get().cloned().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_memory_the_host_cannot_give_is_an_error_not_an_abort() {
        let rules = StagingConfig::for_cores(2);
        let refused = calibrate_around(rules, false, usize::MAX / 2, BUDGET);
        assert!(
            matches!(refused, Err(crate::error::Error::HostOutOfMemory { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn the_rules_come_first_and_no_candidate_repeats() {
        let rules = StagingConfig::for_cores(16);
        let list = candidates(rules, true);
        assert_eq!(
            (
                list[0].threads,
                list[0].chunk_bytes,
                list[0].streaming_downloads
            ),
            (rules.threads, rules.chunk_bytes, true)
        );
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                assert_ne!(
                    (a.threads, a.chunk_bytes, a.streaming_downloads),
                    (b.threads, b.chunk_bytes, b.streaming_downloads)
                );
            }
        }
        // Never a chunk below the rules' (see `candidates`).
        assert!(list.iter().all(|c| c.chunk_bytes >= rules.chunk_bytes));
        // One core: a single thread and the smallest chunk, never zero.
        for c in candidates(StagingConfig::for_cores(1), false) {
            assert!(
                c.threads >= 1 && c.chunk_bytes >= DEFAULT_CHUNK / 4,
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_calibration_measures_within_its_budget_and_chooses_a_measured_setting() -> Result<()> {
        let rules = StagingConfig::for_cores(4);
        let cal = calibrate_around(rules, true, 8 << 20, Duration::from_millis(200))?;
        assert!(cal.measured >= 1 && cal.measured <= cal.planned, "{cal:?}");
        assert!(cal.chosen_gbs.0 > 0.0 && cal.chosen_gbs.1 > 0.0, "{cal:?}");
        assert!(cal.rules_gbs.0 > 0.0 && cal.rules_gbs.1 > 0.0, "{cal:?}");
        let chosen = (
            cal.config.threads,
            cal.config.chunk_bytes,
            cal.streaming_downloads,
        );
        let planned = candidates(rules.effective(), true);
        assert!(
            planned[..cal.measured].iter().any(|c| (
                c.threads,
                c.chunk_bytes,
                c.streaming_downloads
            ) == chosen),
            "chose {chosen:?}, which was not measured"
        );
        // The thresholds and the ring are the rules'.
        assert_eq!(cal.config.upload_threshold, rules.upload_threshold);
        assert_eq!(cal.config.ring_blocks, rules.effective().ring_blocks);
        Ok(())
    }

    #[test]
    fn a_spent_budget_still_measures_the_rules_setting() -> Result<()> {
        let rules = StagingConfig::for_cores(8);
        let cal = calibrate_around(rules, true, 1 << 20, Duration::ZERO)?;
        assert_eq!(cal.measured, 1, "{cal:?}");
        assert_eq!(
            (cal.config.threads, cal.config.chunk_bytes),
            (rules.effective().threads, rules.effective().chunk_bytes)
        );
        Ok(())
    }
}
