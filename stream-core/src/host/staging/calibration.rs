//! Calibration of staged copies: once per process, at the first staged copy, the real
//! staged copies of that copy's device ([`ComposedTrials`]: memcpy and DMA together,
//! through the pinned pool, on an internal stream) are timed with a few settings around
//! the machine's rules, within a time budget, and the fastest is kept for the process.
//!
//! # Why the whole copy, not the host half
//!
//! Until 2026-11-26 the trials timed the host half alone (the memcpy into or out of
//! plain memory standing for the pinned blocks), on the premise that the memcpy is the
//! slower half. Traces of staged copies on a 2x H100 host showed the opposite: the
//! host half alone reached 56-104 GB/s, the DMA 54-55, and the staged 64 MiB copies
//! 21-42 GB/s, with each chunk's DMA running back to back with the next, slowed by the
//! memcpy threads' cache lines it had to read or replace. The host half alone even
//! pointed the wrong way: it favoured 4 MiB chunks (82-97 GB/s up against 39-53 with
//! the rules' 8 MiB), whose small ring stays in the cache, and the staged copies with
//! them ran at 21-27 GB/s against 31-42. What is fast is a property of the composition,
//! so the trials run it. Without a device (`calibrate_staging` called before any
//! copy), or when the trial's device memory or stream cannot be had, the host half
//! alone ([`HostTrials`]) is what is measured, and
//! [`StagingCalibration::composed`] says which.
//!
//! How fast a setting runs varies between hosts by tens of percent (the sweeps behind
//! [`StagingConfig::for_cores`] disagreed between two H100 hosts), which rules from the
//! core count cannot see. The ring depth is left as it is.
//!
//! # What is tried, and for how long
//!
//! The rules' setting first (so a result exists however short the budget), then half
//! and a quarter of its threads, and twice its chunk (never a smaller one: see
//! `candidates`), each both ways; downloads with and without streaming stores. Each candidate runs [`TRIAL_BYTES`] per direction,
//! in [`ROUNDS`] rounds interleaved with the others, and keeps its best round (the
//! least disturbed). A candidate is kept only when it beats the rules' setting by
//! [`MIN_GAIN`], so noise does not move the setting. Trials stop starting after
//! [`BUDGET`]: the host half on a 2-core machine (release build) ran all 7 candidates of
//! the earlier list (with half chunks) in 0.28 s; a composed trial of 64 MiB each way
//! takes a few milliseconds on a GPU host, which plans at most 7. The trials hold
//! [`TRIAL_BYTES`] of pageable memory, as much device memory (composed), and ring blocks
//! of the largest chunk tried (pool blocks when composed, given back to the pool after)
//! for that time, then free them.
//!
//! An unoptimised build (`debug_assertions`) does not calibrate unless told to.
//!
//! Users who want no calibration, or a fixed setting, set `STREAM_CORE_STAGING_CALIBRATE=0`,
//! or pin one with [`set_staging_config`](super::config::set_staging_config) and
//! [`set_streaming_stores`](super::stripe::set_streaming_stores) before their first
//! copy; [`calibrate_staging`] runs it eagerly (at startup, say), and
//! [`staging_calibration`] says what it measured.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::config::{StagingConfig, DEFAULT_CHUNK};
use super::trials::{ComposedTrials, HostTrials, Trials};
use crate::device::{Device, DeviceInner};
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
    /// GB/s of the chosen setting's best trial: uploads, downloads (of the whole staged
    /// copy when [`composed`](Self::composed), else of the host half alone).
    pub chosen_gbs: (f64, f64),
    /// GB/s of the rules' setting, measured the same way: uploads, downloads.
    pub rules_gbs: (f64, f64),
    /// Whether the trials were real staged copies to a device (memcpy and DMA together)
    /// rather than the host half alone (see [`staging`](crate::staging)).
    pub composed: bool,
    /// Candidates measured (of those planned) before the budget ran out.
    pub measured: usize,
    /// Candidates planned.
    pub planned: usize,
    /// How long it took.
    pub took: Duration,
    /// Of [`took`](Self::took): setting up the trials (their memory).
    pub setup: Duration,
    /// Of [`took`](Self::took): the first trial, which also takes the pinned pool's
    /// first blocks from the driver.
    pub first_trial: Duration,
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

/// Runs the calibration around `rules` (downloads streaming per `rules_streaming`) with
/// the trials `make` returns for the candidates' largest chunk and ring depth, starting
/// no trial after `budget`.
pub(crate) fn calibrate_around<T: Trials>(
    rules: StagingConfig,
    rules_streaming: bool,
    budget: Duration,
    make: impl FnOnce(usize, usize) -> Result<T>,
) -> Result<StagingCalibration> {
    let start = Instant::now();
    let rules = rules.effective();
    let mut list = candidates(rules, rules_streaming);
    let largest_chunk = list
        .iter()
        .map(|c| c.chunk_bytes)
        .max()
        .unwrap_or(rules.chunk_bytes);
    let mut trials = make(largest_chunk, rules.ring_blocks)?;
    let setup = start.elapsed();
    let mut first_trial = Duration::ZERO;
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
            let trial = Instant::now();
            let (up, down) = trials.run(config, candidate.streaming_downloads)?;
            if measured == 0 {
                first_trial = trial.elapsed();
            }
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
        composed: trials.composed(),
        rules_gbs: rules_result.best,
        measured,
        planned: list.len(),
        took: start.elapsed(),
        setup,
        first_trial,
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
/// returns what it chose; `None` when `STREAM_CORE_STAGING_CALIBRATE=0` turned it off or
/// it failed. Without a device to copy to, it can time only the host half of staged
/// copies, which predicts the copies poorly (see [`staging`](crate::staging)): prefer
/// [`calibrate_staging_on`], or let the first staged copy run it (it uses that copy's
/// device).
pub fn calibrate_staging() -> Option<StagingCalibration> {
    calibrate_with(None)
}

/// Runs the calibration now if it has not run, with real staged copies to `device`
/// (what a user's first staged copy does), and returns what it chose; `None` when
/// `STREAM_CORE_STAGING_CALIBRATE=0` turned it off or it failed. Call it at startup to
/// keep that time (0.14-0.19 s on the GPU hosts measured) off the first copy.
pub fn calibrate_staging_on(device: &Device) -> Option<StagingCalibration> {
    calibrate_with(Some(&device.inner))
}

/// The calibration for a staged copy to or from `device` (run now if it has not run).
pub(crate) fn calibrate_for(device: &Arc<DeviceInner>) -> Option<StagingCalibration> {
    calibrate_with(Some(device))
}

/// The process's calibration: run once, with real staged copies to `device` when one is
/// given and they can be set up, else with the host half alone.
fn calibrate_with(device: Option<&Arc<DeviceInner>>) -> Option<StagingCalibration> {
    CALIBRATION
        .get_or_init(|| {
            if !enabled() {
                return None;
            }
            let rules = StagingConfig::for_this_machine();
            let streaming = super::stripe::StreamingStores::DownloadsAndUploadTails.for_downloads();
            let composed = device.and_then(|device| {
                let tail = super::stripe::upload_streaming_tail();
                calibrate_around(rules, streaming, BUDGET, |_, _| {
                    ComposedTrials::new(device, TRIAL_BYTES, tail)
                })
                .ok()
            });
            composed.or_else(|| {
                calibrate_around(rules, streaming, BUDGET, |chunk, ring| {
                    HostTrials::new(TRIAL_BYTES, chunk, ring)
                })
                .ok()
            })
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
        let refused = calibrate_around(rules, false, BUDGET, |chunk, ring| {
            HostTrials::new(usize::MAX / 2, chunk, ring)
        });
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
        let cal = calibrate_around(rules, true, Duration::from_millis(200), |chunk, ring| {
            HostTrials::new(8 << 20, chunk, ring)
        })?;
        assert!(!cal.composed);
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
        let cal = calibrate_around(rules, true, Duration::ZERO, |chunk, ring| {
            HostTrials::new(1 << 20, chunk, ring)
        })?;
        assert_eq!(cal.measured, 1, "{cal:?}");
        assert_eq!(
            (cal.config.threads, cal.config.chunk_bytes),
            (rules.effective().threads, rules.effective().chunk_bytes)
        );
        Ok(())
    }

    /// Trials whose figures are scripted: `fast` moves `gain` times the others' GB/s;
    /// the `fail_at`th run (counting from 1) fails.
    struct Scripted {
        fast: (usize, usize, bool),
        gain: f64,
        fail_at: Option<usize>,
        runs: Vec<(usize, usize, bool)>,
    }

    impl Trials for Scripted {
        fn run(&mut self, config: StagingConfig, streaming: bool) -> Result<(f64, f64)> {
            let key = (config.threads, config.chunk_bytes, streaming);
            self.runs.push(key);
            if Some(self.runs.len()) == self.fail_at {
                return Err(crate::error::Error::HostOutOfMemory { requested: 1 });
            }
            let gbs = if key == self.fast {
                10.0 * self.gain
            } else {
                10.0
            };
            Ok((gbs, gbs))
        }

        fn composed(&self) -> bool {
            true
        }
    }

    fn scripted(rules: StagingConfig, gain: f64, fail_at: Option<usize>) -> Scripted {
        let rules = rules.effective();
        Scripted {
            // A candidate other than the rules': half the threads, twice the chunk.
            fast: (rules.threads / 2, rules.chunk_bytes * 2, true),
            gain,
            fail_at,
            runs: Vec::new(),
        }
    }

    #[test]
    fn the_fastest_measured_setting_wins_by_the_minimum_gain_and_only_then() -> Result<()> {
        let rules = StagingConfig::for_cores(16);
        let budget = Duration::from_secs(60);
        let mut seen = Vec::new();
        // 10 % faster: chosen, with the figures it measured.
        let cal = calibrate_around(rules, true, budget, |_, _| {
            let trials = scripted(rules, 1.10, None);
            seen.push(trials.fast);
            Ok(trials)
        })?;
        let fast = seen[0];
        assert_eq!(
            (
                cal.config.threads,
                cal.config.chunk_bytes,
                cal.streaming_downloads
            ),
            fast
        );
        assert!(cal.composed && cal.chosen_gbs == (11.0, 11.0) && cal.rules_gbs == (10.0, 10.0));
        assert_eq!(cal.measured, cal.planned, "every candidate measured");
        assert!(
            cal.setup + cal.first_trial <= cal.took,
            "setup {:?} and first trial {:?} are parts of {:?}",
            cal.setup,
            cal.first_trial,
            cal.took
        );
        // 2 % faster: noise, the rules' setting stays.
        let cal = calibrate_around(rules, true, budget, |_, _| Ok(scripted(rules, 1.02, None)))?;
        let rules = rules.effective();
        assert_eq!(
            (
                cal.config.threads,
                cal.config.chunk_bytes,
                cal.streaming_downloads
            ),
            (rules.threads, rules.chunk_bytes, true)
        );
        Ok(())
    }

    #[test]
    fn a_trial_that_fails_fails_the_calibration() {
        let rules = StagingConfig::for_cores(16);
        let failed = calibrate_around(rules, true, Duration::from_secs(60), |_, _| {
            Ok(scripted(rules, 1.10, Some(3)))
        });
        assert!(
            matches!(failed, Err(crate::error::Error::HostOutOfMemory { .. })),
            "{failed:?}"
        );
        // Trials that cannot be set up (no device memory, say) fail it too.
        let refused = calibrate_around(rules, true, Duration::from_secs(60), |_, _| {
            Err::<Scripted, _>(crate::error::Error::HostOutOfMemory { requested: 1 })
        });
        assert!(refused.is_err());
    }
}
