//! The staging settings of the pageable case's runs and diagnoses: one pinned for the run
//! (`BENCH_STAGING_SET`, `BENCH_STREAMING_STORES`), the calibrated one the diagnoses use,
//! and putting the run's own back after a diagnosis that changed it.

use stream_core::staging::{StagingConfig, StreamingStores};

use crate::env::MIB;
use crate::error::{Error, Result};

/// The setting the case's staged copies use: the calibration's threads and chunk (the
/// rules' without a calibration), for the diagnoses that time staged copies of their own.
pub(super) fn calibrated_config() -> StagingConfig {
    use stream_core::staging::{staging_calibration, staging_config};
    match staging_calibration() {
        Some(cal) => StagingConfig {
            threads: cal.config.threads,
            chunk_bytes: cal.config.chunk_bytes,
            ..staging_config()
        },
        None => staging_config(),
    }
}

/// `BENCH_STREAMING_STORES=never|downloads|tails|always`: the streaming-store setting
/// this run pins for every staged copy, if any; an unknown value is an error.
pub fn streaming_stores_of_this_run() -> Result<Option<StreamingStores>> {
    let Ok(value) = std::env::var("BENCH_STREAMING_STORES") else {
        return Ok(None);
    };
    Ok(Some(match value.trim() {
        "never" | "0" => StreamingStores::Never,
        "downloads" => StreamingStores::Downloads,
        "tails" => StreamingStores::DownloadsAndUploadTails,
        "always" | "1" => StreamingStores::Always,
        other => {
            return Err(Error::msg(format!(
                "BENCH_STREAMING_STORES={other}: expected never, downloads, tails or always"
            )))
        }
    }))
}

/// After a diagnosis that compared streaming-store settings: the run's own setting again
/// (`BENCH_STREAMING_STORES`), or none pinned, so that the cases after it use the
/// calibration's choice as they would have.
pub(super) fn restore_streaming_stores() -> Result<()> {
    match streaming_stores_of_this_run()? {
        Some(setting) => stream_core::staging::set_streaming_stores(setting),
        None => stream_core::staging::reset_streaming_stores(),
    }
    Ok(())
}

/// `BENCH_STAGING_SET=THREADS,CHUNK_MIB` (a diagnosis): the staging setting every copy
/// of this run uses instead of the calibrated one, to compare settings under the
/// interleaved samplers' cache state, which the calibration's back-to-back trials do not
/// see.
pub(super) fn pinned_setting() -> Result<Option<StagingConfig>> {
    let Some(text) = std::env::var_os("BENCH_STAGING_SET") else {
        return Ok(None);
    };
    let text = text.to_string_lossy();
    let parsed = text
        .split_once(',')
        .and_then(|(t, c)| {
            Some((
                t.trim().parse::<usize>().ok()?,
                c.trim().parse::<usize>().ok()?,
            ))
        })
        .filter(|&(t, c)| t > 0 && c > 0);
    let Some((threads, chunk_mib)) = parsed else {
        return Err(Error::msg(format!(
            "BENCH_STAGING_SET={text}: expected THREADS,CHUNK_MIB (two positive integers)"
        )));
    };
    Ok(Some(StagingConfig {
        threads,
        chunk_bytes: chunk_mib * MIB,
        ..StagingConfig::for_this_machine()
    }))
}
