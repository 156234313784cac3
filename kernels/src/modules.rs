//! The crate's CUDA modules, one by one and grouped as programs use them, for
//! [`Device::prepare_kernels`](stream_core::Device::prepare_kernels): each module
//! compiles at its first launch otherwise (a tenth of a second to half a second each
//! with NVRTC), which a server would rather pay before its first request.
//!
//! ```no_run
//! # fn main() -> stream_core::Result<()> {
//! let dev = stream_core::Device::new(0)?;
//! dev.prepare_kernels(kernels::modules::F32)?; // before the first f32 launch
//! dev.prepare_kernels(&[kernels::modules::ELEMENTWISE_F64])?; // only what is used
//! // A program of f32 and f16 work with transposed GEMM operands:
//! let mut used = kernels::modules::F32.to_vec();
//! used.extend_from_slice(kernels::modules::HALF);
//! used.extend_from_slice(kernels::modules::SGEMM_TRANSPOSED);
//! dev.prepare_kernels(&used)?; // what `F32` loaded already is not loaded again
//! # Ok(()) }
//! ```

use stream_core::KernelSource::{self, Cuda};

use crate::declarations as k;

/// `fill`, `scale` and `axpy` of `f32` (and `fill` of `u32`).
pub const ELEMENTWISE_F32: KernelSource = Cuda(k::ELEMENTWISE_F32);
/// `fill`, `scale` and `axpy` of `f64`.
pub const ELEMENTWISE_F64: KernelSource = Cuda(k::ELEMENTWISE_F64);
/// `fill`, `scale` and `axpy` of `f16` and `bf16`.
pub const ELEMENTWISE_HALF: KernelSource = Cuda(k::ELEMENTWISE_HALF);
/// `reduce_sum` and `dot` of `f32`, and the last pass of those of `f16` and `bf16`.
pub const REDUCE_F32: KernelSource = Cuda(k::REDUCE_F32);
/// `reduce_sum` and `dot` of `f64`.
pub const REDUCE_F64: KernelSource = Cuda(k::REDUCE_F64);
/// The first pass of `reduce_sum` and `dot` of `f16` and `bf16` (the last is
/// [`REDUCE_F32`]'s).
pub const REDUCE_HALF: KernelSource = Cuda(k::REDUCE_HALF);
/// `transpose`.
pub const TRANSPOSE: KernelSource = Cuda(k::TRANSPOSE);

/// What `f32` work launches: the element-wise kernels and reductions, `transpose`, and
/// the tiled SGEMM with both operands as stored, in one pass and with k split.
pub const F32: &[KernelSource] = &[
    ELEMENTWISE_F32,
    REDUCE_F32,
    TRANSPOSE,
    Cuda(k::SGEMM_NN),
    Cuda(k::SPLIT_K_NN),
    Cuda(k::SPLIT_K_SUM),
];

/// What `f64` work launches: the element-wise kernels and reductions.
pub const F64: &[KernelSource] = &[ELEMENTWISE_F64, REDUCE_F64];

/// What `f16` and `bf16` work launches: the element-wise kernels and reductions.
pub const HALF: &[KernelSource] = &[ELEMENTWISE_HALF, REDUCE_HALF, REDUCE_F32];

/// The tiled SGEMM's forms with an operand read transposed ([`Op::T`](crate::Op)), in
/// one pass and with k split.
pub const SGEMM_TRANSPOSED: &[KernelSource] = &[
    Cuda(k::SGEMM_TN),
    Cuda(k::SGEMM_NT),
    Cuda(k::SGEMM_TT),
    Cuda(k::SPLIT_K_TN),
    Cuda(k::SPLIT_K_NT),
    Cuda(k::SPLIT_K_TT),
    Cuda(k::SPLIT_K_SUM),
];

/// Every module of the crate.
pub const ALL: &[KernelSource] = &[
    ELEMENTWISE_F32,
    ELEMENTWISE_F64,
    ELEMENTWISE_HALF,
    REDUCE_F32,
    REDUCE_F64,
    REDUCE_HALF,
    TRANSPOSE,
    Cuda(k::SGEMM_NN),
    Cuda(k::SGEMM_TN),
    Cuda(k::SGEMM_NT),
    Cuda(k::SGEMM_TT),
    Cuda(k::SPLIT_K_NN),
    Cuda(k::SPLIT_K_TN),
    Cuda(k::SPLIT_K_NT),
    Cuda(k::SPLIT_K_TT),
    Cuda(k::SPLIT_K_SUM),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn text(source: &KernelSource) -> &'static str {
        match *source {
            KernelSource::Cuda(text) | KernelSource::Ptx(text) => text,
        }
    }

    /// `ALL` names every module once, and every other group only modules of `ALL`.
    #[test]
    fn all_holds_each_module_once_and_every_group_is_part_of_it() {
        let all: Vec<&str> = ALL.iter().map(text).collect();
        for (i, a) in all.iter().enumerate() {
            assert!(
                !all[i + 1..].contains(a),
                "module {i} of ALL is listed twice"
            );
        }
        for group in [F32, F64, HALF, SGEMM_TRANSPOSED] {
            for source in group {
                assert!(
                    all.contains(&text(source)),
                    "a group names a module ALL lacks"
                );
            }
        }
    }

    /// Each module that declares a kernel is in `ALL`: the declarations' sources are
    /// the modules' (`pub(crate)` constants in `declarations.rs`), counted there.
    #[test]
    fn all_has_as_many_modules_as_the_declarations_use() {
        let declarations = include_str!("declarations.rs");
        let used: std::collections::BTreeSet<&str> = declarations
            .match_indices("#[kernel(cuda = ")
            .map(|(at, pattern)| {
                let rest = &declarations[at + pattern.len()..];
                &rest[..rest.find([',', ')']).unwrap_or(rest.len())]
            })
            .collect();
        assert_eq!(used.len(), ALL.len(), "declarations use {used:?}");
    }
}
