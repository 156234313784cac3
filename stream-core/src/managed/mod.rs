//! Managed (unified) memory whose residency is a type: [`ManagedVec`] is the host's
//! (`host`/`host_mut`) while no scope holds it; attached to a scope it is the scope's
//! ([`ManagedSliceMut`], [`ManagedSlice`]) and the host cannot touch it; prefetches move
//! it, and [`Scope::prefetch_to_host`](crate::Scope::prefetch_to_host) hands it back to
//! the host inside the scope through a [`Pending`](crate::Pending).
//!
//! Owns: `ManagedVec` and its allocation rules (the free-memory budget, oversubscription
//! opt-in), the views and their lends to forks, attaching, prefetching, advice
//! ([`ManagedAdvice`]), the mode decision for devices with and without concurrent managed
//! access ([`ManagedAccess`]), and [`ManagedMemoryStats`]. Uses: `driver/` (managed
//! allocations and operations), `device/`, `memory/` (brand, views, `DeviceRepr`),
//! `scope/` (`Scope`, `Pending`, `Lend`), `error`.

//!
//! # Which pattern wins when
//!
//! Measured with `bench --case managed` (1 GiB, H100 and H200; see the README):
//! * **Data the device reuses** (several kernels, or a kernel that reads it many
//!   times): prefetch it ([`Scope::prefetch_to_device`](crate::Scope::prefetch_to_device));
//!   kernels then run as on device memory (1.00x). The way back is the driver's
//!   migration to the host (10-16 GB/s), which keeps a full round trip at 0.4-0.5x of
//!   explicit pinned copies: for data that must come back each time, a `DeviceVec` and
//!   pinned copies are faster.
//! * **Data one kernel passes over once**: leave it on the host and let the device map
//!   it ([`ManagedAdvice::PreferredLocation`] host, [`ManagedAdvice::AccessedBy`] the
//!   device): no migration at all, 1.47-1.50x of explicit pinned copies end to end,
//!   though the kernel itself runs over the bus (25-40 ms against 0.7-0.9 ms).
//! * **Demand paging** (neither): 3-4x slower than prefetching end to end, and the
//!   kernel 240x slower; it is what managed memory does when nothing is said.
//!
//! The library's own cost on each managed operation is at most 3 % over the same driver
//! calls made raw in any round, 0.4 % in the median (`bench --case managed`, rows "raw
//! calls", an H200).

mod access;
mod advice;
mod attach;
mod budget;
mod lend;
mod managed_vec;
mod prefetch;
mod stats;
mod view;

pub use access::ManagedAccess;
pub use advice::{ManagedAdvice, ManagedLocation};
pub use managed_vec::ManagedVec;
pub use stats::ManagedMemoryStats;
pub use view::{ManagedMemory, ManagedSlice, ManagedSliceMut};
