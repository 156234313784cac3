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
