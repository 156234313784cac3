//! Guides that are longer than an item's docs. Each is a page of the crate docs whose
//! examples are compiled as doctests.

#[doc = include_str!("coming_from_cudarc.md")]
pub mod coming_from_cudarc {}

#[doc = include_str!("coming_from_torch_distributed.md")]
pub mod coming_from_torch_distributed {}
