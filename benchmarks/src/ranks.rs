//! What the "ranks" diagnoses share (`BENCH_STAGING_RANKS`, `BENCH_LAUNCH_RANKS`): a
//! thread per GPU, as a process that drives every GPU from a thread each runs its
//! ranks, timed alone and all at once.

use std::sync::Barrier;

use stream_core::Device;

use crate::error::{Context, Error, Result};

/// Which side a diagnosis times: the library, or raw driver calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Path {
    Ours,
    Raw,
}

/// The GPUs of the threads: every visible one (at most eight), or GPU 0 twice where
/// there is one; none without a GPU.
pub fn ordinals() -> Result<Vec<usize>> {
    Ok(match Device::count()? {
        0 => Vec::new(),
        1 => vec![0, 0],
        n => (0..n.min(8)).collect(),
    })
}

/// What one thread measured alone (the first GPU of `ordinals`), and each thread when a
/// thread per GPU of `ordinals` ran at once: on each thread `prepare(ordinal)`, then,
/// once every thread has prepared (also when one failed, so that none waits forever),
/// `measure` of what it prepared.
pub fn alone_and_together<P>(
    ordinals: &[usize],
    prepare: impl Fn(usize) -> Result<P> + Sync,
    measure: impl Fn(P) -> Result<f64> + Sync,
) -> Result<(f64, Vec<f64>)> {
    let alone = at_once(&ordinals[..1.min(ordinals.len())], &prepare, &measure)?;
    let together = at_once(ordinals, &prepare, &measure)?;
    Ok((alone.first().copied().unwrap_or(f64::NAN), together))
}

/// `alone`, the threads' figures together, and the slowest of them as a multiple of
/// `alone`, with `decimals` decimals.
pub fn summary(alone: f64, together: &[f64], decimals: usize) -> String {
    let slowest = together.iter().copied().fold(0.0, f64::max);
    let each: Vec<String> = together.iter().map(|t| format!("{t:.decimals$}")).collect();
    format!(
        "alone {alone:.decimals$}, together {} (slowest {:.2}x of alone)",
        each.join(" "),
        slowest / alone
    )
}

/// A thread per entry of `ordinals`, each preparing, waiting for the others, measuring.
fn at_once<P>(
    ordinals: &[usize],
    prepare: &(impl Fn(usize) -> Result<P> + Sync),
    measure: &(impl Fn(P) -> Result<f64> + Sync),
) -> Result<Vec<f64>> {
    let start = Barrier::new(ordinals.len());
    std::thread::scope(|threads| {
        let handles: Vec<_> = ordinals
            .iter()
            .map(|&ordinal| {
                let start = &start;
                threads.spawn(move || -> Result<f64> {
                    let prepared = prepare(ordinal);
                    start.wait();
                    measure(prepared?)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| Error::msg("a thread panicked"))?)
            .collect::<Result<Vec<f64>>>()
            .context("a thread per GPU")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_is_the_first_gpu_and_together_is_every_thread_in_order() {
        let (alone, together) =
            alone_and_together(&[3, 5, 7], |o| Ok(o * 10), |p| Ok(p as f64)).unwrap();
        assert_eq!(alone, 30.0);
        assert_eq!(together, vec![30.0, 50.0, 70.0]);
        assert_eq!(
            summary(alone, &together, 1),
            "alone 30.0, together 30.0 50.0 70.0 (slowest 2.33x of alone)"
        );
    }

    #[test]
    fn a_thread_whose_setup_failed_does_not_keep_the_others_waiting() {
        let failed = alone_and_together(
            &[0, 1, 2],
            |o| match o {
                1 => Err(Error::msg("no such GPU")),
                o => Ok(o),
            },
            |p| Ok(p as f64),
        );
        assert!(failed.is_err(), "the failed setup was not reported");
    }

    #[test]
    fn a_panicking_thread_is_an_error() {
        let panicked = alone_and_together(&[0, 1], Ok, |p| match p {
            1 => panic!("deliberate"),
            p => Ok(p as f64),
        });
        assert!(panicked.is_err());
    }
}
