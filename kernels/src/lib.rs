//! CUDA kernels with typed, safe launch wrappers (work in progress: see issue 3).
#![forbid(unsafe_code)]
