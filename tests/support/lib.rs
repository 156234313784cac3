//! Shared helpers of the GPU tests.
