//! The cache-state diagnosis of the pageable case, with `BENCH_STAGING_CACHE` set:
//! printed only. Staged 64 MiB copies measured by the case (its samplers interleaved)
//! moved less than the calibration's own trials (the same copies back to back), and the
//! one difference known was what the host's caches hold when a copy starts. This
//! measures the staged copy and the host memcpy ceiling at 64 MiB, both ways, in three
//! states, alternated round by round:
//! * **back to back**: the same copy ran just before (what the calibration's trials see);
//! * **evicted**: 1 GiB of other memory was copied just before, on every core (what a
//!   copy sees after unrelated work, and close to what the interleaved samplers see);
//! * **CPU-written**: one thread wrote the host buffer (the upload's source, the
//!   download's destination) just before, as a program that produces the data would.

use stream_core::DeviceVec;

use super::host_memcpy::parallel_copy;
use crate::env::{Env, MIB};
use crate::error::Result;
use crate::raw::RawPinned;
use crate::sampling::spread_text;

/// Rounds, each measuring every (state, copy) pair once.
const ROUNDS: usize = 11;
/// Bytes of the memory copied to push the copy's buffers out of the caches.
const EVICT_BYTES: usize = 512 * MIB;

/// What the host's caches hold when a measured copy starts.
#[derive(Clone, Copy, Debug)]
enum CacheState {
    BackToBack,
    Evicted,
    CpuWritten,
}

pub(super) fn run(env: &Env) -> Result<()> {
    let bytes = 64 * MIB;
    let n = bytes / 4;
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    let mut src: Vec<f32> = vec![1.0; n];
    let mut dst: Vec<f32> = vec![0.0; n];
    let mut pinned = RawPinned::new(n)?;
    let mut dev_buf: DeviceVec<f32> = env.dev.alloc_vec(n)?;
    let evict_src: Vec<f32> = vec![2.0; EVICT_BYTES / 4];
    let mut evict_dst: Vec<f32> = vec![0.0; EVICT_BYTES / 4];
    let config = super::variables::calibrated_config();
    println!(
        "  staging cache state, 64 MiB, {} threads, {} MiB chunks; host memcpy on {threads} threads; {ROUNDS} rounds; GB/s medians (min, max)",
        config.threads,
        config.chunk_bytes / MIB
    );
    let states = [
        CacheState::BackToBack,
        CacheState::Evicted,
        CacheState::CpuWritten,
    ];
    // [state][staged up, staged down, memcpy up, memcpy down] -> seconds per round.
    let mut seconds = vec![[const { Vec::new() }; 4]; states.len()];
    let mut stamp = 0.0f32;
    for _ in 0..ROUNDS {
        for (&state, per_copy) in states.iter().zip(seconds.iter_mut()) {
            for (which, samples) in per_copy.iter_mut().enumerate() {
                let upload = which % 2 == 0;
                let staged = which < 2;
                let mut once = |src: &mut Vec<f32>, dst: &mut Vec<f32>| -> Result<f64> {
                    if staged {
                        let mut copy = super::StagedCopy {
                            stream: &env.streams[0],
                            device: &mut dev_buf,
                            src,
                            dst,
                        };
                        copy.seconds(config, upload, None)
                    } else if upload {
                        parallel_copy(pinned.as_mut_slice(), src, threads)
                    } else {
                        parallel_copy(dst, pinned.as_slice(), threads)
                    }
                };
                match state {
                    CacheState::BackToBack => {
                        once(&mut src, &mut dst)?;
                    }
                    CacheState::Evicted => {
                        parallel_copy(&mut evict_dst, &evict_src, threads)?;
                        parallel_copy(&mut evict_dst, &evict_src, threads)?;
                    }
                    CacheState::CpuWritten => {
                        stamp += 1.0;
                        if upload {
                            src.fill(stamp);
                        } else {
                            dst.fill(stamp);
                        }
                    }
                }
                // The staged copy's time is its scope's; the memcpy's is its threads'.
                samples.push(once(&mut src, &mut dst)?);
            }
        }
    }
    let names = ["staged up", "staged down", "memcpy up", "memcpy down"];
    for (state, per_copy) in states.iter().zip(&seconds) {
        let cells: Vec<String> = per_copy
            .iter()
            .zip(names)
            .map(|(samples, name)| {
                let gbs: Vec<f64> = samples.iter().map(|s| bytes as f64 / s / 1e9).collect();
                format!("{name} {}", spread_text(&gbs, 1))
            })
            .collect();
        println!(
            "  staging cache state: {:12} {}",
            format!("{state:?}"),
            cells.join("; ")
        );
    }
    Ok(())
}
