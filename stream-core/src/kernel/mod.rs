//! Kernels: a declared kernel ([`Kernel`], made by `#[kernel]`), the launch shapes its
//! declaration admits ([`KernelShape`]), launch configurations ([`LaunchConfig`]) and
//! their checks, the per-device cache of loaded modules, and the process's cache of
//! compiled images (one compile per source for devices of one compute capability).
//!
//! Owns: `Kernel`, `KernelSource`, `KernelParam`, `KernelShape` and its rules,
//! `LaunchConfig`, the module cache and the compiled images (NVRTC compilation goes
//! through `driver::nvrtc`), and `Device::prepare_kernels`, which fills that cache
//! ahead of first launches. Uses: `driver/`, `device/`, `error`. The launch itself is
//! a scope's operation (`scope::launch`).

pub(crate) mod compiled_images;
pub(crate) mod config;
pub(crate) mod declaration;
pub(crate) mod module_cache;
pub(crate) mod params;
pub(crate) mod prepare;
pub(crate) mod shape;

pub use config::LaunchConfig;
pub use declaration::{Kernel, KernelSource};
pub use params::KernelParam;
pub use shape::{BlockRule, KernelShape, SharedRule};
