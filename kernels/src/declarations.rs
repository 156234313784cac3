//! The kernels' Rust signatures and launch shapes, declared once. Each `unsafe fn` is
//! the promise that the CUDA function in `../cuda/` has exactly these parameters (each
//! slice as a pointer and a `size_t` length), stays within those lengths, and writes
//! only through `&mut` slices, for every launch its `block` admits: each kernel is
//! written for exactly that block (the reductions index a `__shared__` array of 256
//! with `threadIdx.x`, the transpose a 64x65 tile with `threadIdx.y + 60`, the SGEMM's
//! 256 threads a 128x128 tile of C; the element-wise kernels index one dimension), and
//! carries a matching `__launch_bounds__` (checked by the test in `launch_bounds.rs`).
//! The wrappers refuse any other block before launching. None of them uses dynamic
//! shared memory, so any amount is admitted.
//!
//! This module is private: the crate's public functions choose the launch shapes and
//! check the lengths; the module is the crate's only `unsafe`.
#![allow(unsafe_code)]

use half::{bf16, f16};
use stream_core::kernel;

// The element-wise kernels and the reductions: a module per precision (f32, f64, and f16
// with bf16), each its shared header then its kernels, so that a program compiles only the
// precisions it launches. The f16 and bf16 kernels convert through `half.cuh`, first.
pub(crate) const ELEMENTWISE_F32: &str = concat!(
    include_str!("../cuda/elementwise.cuh"),
    include_str!("../cuda/elementwise_f32.cu")
);
pub(crate) const ELEMENTWISE_F64: &str = concat!(
    include_str!("../cuda/elementwise.cuh"),
    include_str!("../cuda/elementwise_f64.cu")
);
pub(crate) const ELEMENTWISE_HALF: &str = concat!(
    include_str!("../cuda/half.cuh"),
    include_str!("../cuda/elementwise.cuh"),
    include_str!("../cuda/elementwise_half.cu")
);
pub(crate) const REDUCE_F32: &str = concat!(
    include_str!("../cuda/reduce.cuh"),
    include_str!("../cuda/reduce_f32.cu")
);
pub(crate) const REDUCE_F64: &str = concat!(
    include_str!("../cuda/reduce.cuh"),
    include_str!("../cuda/reduce_f64.cu")
);
pub(crate) const REDUCE_HALF: &str = concat!(
    include_str!("../cuda/half.cuh"),
    include_str!("../cuda/reduce.cuh"),
    include_str!("../cuda/reduce_half.cu")
);
pub(crate) const TRANSPOSE: &str = include_str!("../cuda/transpose.cu");
// The SGEMM: a module per kernel (one pass, split k) and per form of the operands (A, then
// B, as stored `N` or transposed `T`), each compiled at its first launch, so that a program
// waits only for the forms it uses (`cuda/sgemm_tiles.cuh` has the figures). The form is
// two #defines before the shared header.
macro_rules! sgemm_form {
    (N, N) => {
        "#define A_TRANSPOSED false\n#define B_TRANSPOSED false\n"
    };
    (T, N) => {
        "#define A_TRANSPOSED true\n#define B_TRANSPOSED false\n"
    };
    (N, T) => {
        "#define A_TRANSPOSED false\n#define B_TRANSPOSED true\n"
    };
    (T, T) => {
        "#define A_TRANSPOSED true\n#define B_TRANSPOSED true\n"
    };
}
/// The module of `file`'s kernel for the form `a, b`: the form, the shared header, the file.
macro_rules! sgemm_module {
    ($a:ident, $b:ident, $file:literal) => {
        concat!(
            sgemm_form!($a, $b),
            include_str!("../cuda/sgemm_tiles.cuh"),
            include_str!($file)
        )
    };
}
pub(crate) const SGEMM_NN: &str = sgemm_module!(N, N, "../cuda/sgemm.cu");
pub(crate) const SGEMM_TN: &str = sgemm_module!(T, N, "../cuda/sgemm.cu");
pub(crate) const SGEMM_NT: &str = sgemm_module!(N, T, "../cuda/sgemm.cu");
pub(crate) const SGEMM_TT: &str = sgemm_module!(T, T, "../cuda/sgemm.cu");
pub(crate) const SPLIT_K_NN: &str = sgemm_module!(N, N, "../cuda/sgemm_split_k.cu");
pub(crate) const SPLIT_K_TN: &str = sgemm_module!(T, N, "../cuda/sgemm_split_k.cu");
pub(crate) const SPLIT_K_NT: &str = sgemm_module!(N, T, "../cuda/sgemm_split_k.cu");
pub(crate) const SPLIT_K_TT: &str = sgemm_module!(T, T, "../cuda/sgemm_split_k.cu");
pub(crate) const SPLIT_K_SUM: &str = include_str!("../cuda/sgemm_split_k_sum.cu");
/// The one-pass and split-k modules for operands as stored, as the kernels get them: for
/// the launch-bounds test (each file with what precedes it) and programs that launch the
/// one-pass kernel themselves ([`crate::SGEMM_TILED_SOURCE`]).
pub(crate) const SGEMM_AS_STORED: &str = SGEMM_NN;
#[cfg(test)]
pub(crate) const SPLIT_K_AS_STORED: &str = SPLIT_K_NN;

#[kernel(cuda = ELEMENTWISE_F32, block = 256)]
pub(crate) unsafe fn fill_f32(v: f32, y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE_F64, block = 256)]
pub(crate) unsafe fn fill_f64(v: f64, y: &mut [f64]);
#[kernel(cuda = ELEMENTWISE_F32, block = 256)]
pub(crate) unsafe fn fill_u32(v: u32, y: &mut [u32]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn fill_f16(v: f16, y: &mut [f16]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn fill_bf16(v: bf16, y: &mut [bf16]);

#[kernel(cuda = ELEMENTWISE_F32, block = 256)]
pub(crate) unsafe fn scale_f32(a: f32, x: &[f32], y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE_F64, block = 256)]
pub(crate) unsafe fn scale_f64(a: f64, x: &[f64], y: &mut [f64]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn scale_f16(a: f16, x: &[f16], y: &mut [f16]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn scale_bf16(a: bf16, x: &[bf16], y: &mut [bf16]);

#[kernel(cuda = ELEMENTWISE_F32, block = 256)]
pub(crate) unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE_F64, block = 256)]
pub(crate) unsafe fn axpy_f64(a: f64, x: &[f64], y: &mut [f64]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn axpy_f16(a: f16, x: &[f16], y: &mut [f16]);
#[kernel(cuda = ELEMENTWISE_HALF, block = 256)]
pub(crate) unsafe fn axpy_bf16(a: bf16, x: &[bf16], y: &mut [bf16]);

#[kernel(cuda = REDUCE_F32, block = 256)]
pub(crate) unsafe fn sum_partials_f32(x: &[f32], partials: &mut [f32]);
#[kernel(cuda = REDUCE_F64, block = 256)]
pub(crate) unsafe fn sum_partials_f64(x: &[f64], partials: &mut [f64]);
#[kernel(cuda = REDUCE_F32, block = 256)]
pub(crate) unsafe fn dot_partials_f32(x: &[f32], y: &[f32], partials: &mut [f32]);
#[kernel(cuda = REDUCE_F64, block = 256)]
pub(crate) unsafe fn dot_partials_f64(x: &[f64], y: &[f64], partials: &mut [f64]);
#[kernel(cuda = REDUCE_HALF, block = 256)]
pub(crate) unsafe fn sum_partials_f16(x: &[f16], partials: &mut [f32]);
#[kernel(cuda = REDUCE_HALF, block = 256)]
pub(crate) unsafe fn sum_partials_bf16(x: &[bf16], partials: &mut [f32]);
#[kernel(cuda = REDUCE_HALF, block = 256)]
pub(crate) unsafe fn dot_partials_f16(x: &[f16], y: &[f16], partials: &mut [f32]);
#[kernel(cuda = REDUCE_HALF, block = 256)]
pub(crate) unsafe fn dot_partials_bf16(x: &[bf16], y: &[bf16], partials: &mut [f32]);
#[kernel(cuda = REDUCE_F32, block = 256)]
pub(crate) unsafe fn final_sum_f32(partials: &[f32], out: &mut [f32]);
#[kernel(cuda = REDUCE_F64, block = 256)]
pub(crate) unsafe fn final_sum_f64(partials: &[f64], out: &mut [f64]);

#[kernel(cuda = TRANSPOSE, block = (64, 4))]
pub(crate) unsafe fn transpose_f32(input: &[f32], output: &mut [f32], rows: u32, cols: u32);

#[kernel(cuda = SGEMM_NN, name = "sgemm_tiled", block = 256)]
pub(crate) unsafe fn sgemm_tiled_nn(
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
);
#[kernel(cuda = SGEMM_TN, name = "sgemm_tiled", block = 256)]
pub(crate) unsafe fn sgemm_tiled_tn(
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
);
#[kernel(cuda = SGEMM_NT, name = "sgemm_tiled", block = 256)]
pub(crate) unsafe fn sgemm_tiled_nt(
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
);
#[kernel(cuda = SGEMM_TT, name = "sgemm_tiled", block = 256)]
pub(crate) unsafe fn sgemm_tiled_tt(
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
);
#[kernel(cuda = SPLIT_K_NN, name = "sgemm_split_k", block = 256)]
pub(crate) unsafe fn sgemm_split_k_nn(
    m: u32,
    n: u32,
    k: u32,
    chunk: u32,
    a: &[f32],
    b: &[f32],
    partials: &mut [f32],
);
#[kernel(cuda = SPLIT_K_TN, name = "sgemm_split_k", block = 256)]
pub(crate) unsafe fn sgemm_split_k_tn(
    m: u32,
    n: u32,
    k: u32,
    chunk: u32,
    a: &[f32],
    b: &[f32],
    partials: &mut [f32],
);
#[kernel(cuda = SPLIT_K_NT, name = "sgemm_split_k", block = 256)]
pub(crate) unsafe fn sgemm_split_k_nt(
    m: u32,
    n: u32,
    k: u32,
    chunk: u32,
    a: &[f32],
    b: &[f32],
    partials: &mut [f32],
);
#[kernel(cuda = SPLIT_K_TT, name = "sgemm_split_k", block = 256)]
pub(crate) unsafe fn sgemm_split_k_tt(
    m: u32,
    n: u32,
    k: u32,
    chunk: u32,
    a: &[f32],
    b: &[f32],
    partials: &mut [f32],
);
#[kernel(cuda = SPLIT_K_SUM, block = 256)]
pub(crate) unsafe fn sgemm_split_k_sum(
    m: u32,
    n: u32,
    splits: u32,
    alpha: f32,
    partials: &[f32],
    beta: f32,
    c: &mut [f32],
);
