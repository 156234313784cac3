//! Tuning and observing staged copies of pageable host memory (see [pinned and pageable
//! host memory](crate#pinned-and-pageable-host-memory)): the configuration every
//! staged copy uses, a per-thread override (for benchmarks and tests that compare
//! settings), per-thread counts of staged copies, and whether host memory is pinned.
//!
//! ```
//! use stream_core::staging::{staging_config, with_staging_config, StagingConfig};
//! let direct = with_staging_config(StagingConfig::DIRECT, staging_config);
//! assert_eq!(direct.upload_threshold, usize::MAX); // every copy takes the driver's path
//! ```

pub use crate::host::staging::calibration::{
    calibrate_staging, staging_calibration, StagingCalibration, BUDGET as CALIBRATION_BUDGET,
    CALIBRATE_ENV,
};
pub use crate::host::staging::config::{
    set_staging_config, staged_copy_counts, staging_config, with_staging_config, StagingConfig,
    DEFAULT_CHUNK, DEFAULT_RING, DEFAULT_THREADS, DEFAULT_THRESHOLD,
};
pub use crate::host::staging::detection::host_memory_is_pinned;
pub use crate::host::staging::stripe::{set_streaming_stores, streaming_stores, StreamingStores};
