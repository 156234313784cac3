//! Tuning and observing staged copies of pageable host memory (see [pinned and pageable
//! host memory](crate#pinned-and-pageable-host-memory)): the configuration every
//! staged copy uses, a per-thread override (for benchmarks and tests that compare
//! settings), per-thread counts of staged copies, and whether host memory is pinned.
//!
//! **Calibration.** At the first staged copy of an optimised build, the library times
//! real staged copies to that copy's device (pageable memory of its own, the pinned
//! pool, device memory of its own, on an internal stream) with a few settings around
//! the rules of [`StagingConfig::for_this_machine`]: the memcpy threads, the chunk size,
//! and streaming stores for downloads, copying 64 MiB each way per setting in two
//! rounds, starting no trial after [`CALIBRATION_BUDGET`] (0.25 s).
//! A setting at least 5 % faster than the rules' (harmonic mean of both ways) is kept
//! for the process; [`staging_calibration`] says what was measured and chosen. It is
//! skipped when the program pinned a setting ([`set_staging_config`],
//! [`set_streaming_stores`], or [`with_staging_config`] on the copying thread), when
//! `STREAM_CORE_STAGING_CALIBRATE=0` (and in unoptimised builds unless it is `1`);
//! [`calibrate_staging_on`] runs it eagerly, at startup say, to keep it off the first
//! copy ([`calibrate_staging`], without a device, can time only the host half).
//!
//! ```
//! use stream_core::staging::{staging_config, with_staging_config, StagingConfig};
//! let direct = with_staging_config(StagingConfig::DIRECT, staging_config);
//! assert_eq!(direct.upload_threshold, usize::MAX); // every copy takes the driver's path
//! ```

pub use crate::host::staging::calibration::{
    calibrate_staging, calibrate_staging_on, staging_calibration, StagingCalibration,
    BUDGET as CALIBRATION_BUDGET, CALIBRATE_ENV,
};
pub use crate::host::staging::config::{
    set_staging_config, staged_copy_counts, staging_config, with_staging_config, StagingConfig,
    DEFAULT_CHUNK, DEFAULT_RING, DEFAULT_THREADS, DEFAULT_THRESHOLD,
};
pub use crate::host::staging::detection::host_memory_is_pinned;
pub use crate::host::staging::stripe::{
    reset_streaming_stores, set_streaming_stores, streaming_stores, StreamingStores,
    UPLOAD_STREAMING_TAIL,
};
