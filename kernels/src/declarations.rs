//! The kernels' Rust signatures, declared once. Each `unsafe fn` is the promise that
//! the CUDA function in `../cuda/` has exactly these parameters (each slice as a
//! pointer and a `size_t` length), stays within those lengths, and writes only
//! through `&mut` slices. This module is the crate's only `unsafe`.
#![allow(unsafe_code)]

use stream_core::kernel;

const ELEMENTWISE: &str = include_str!("../cuda/elementwise.cu");
const REDUCE: &str = include_str!("../cuda/reduce.cu");
const TRANSPOSE: &str = include_str!("../cuda/transpose.cu");
const SGEMM: &str = include_str!("../cuda/sgemm.cu");

#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn fill_f32(v: f32, y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn fill_f64(v: f64, y: &mut [f64]);
#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn fill_u32(v: u32, y: &mut [u32]);

#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn scale_f32(a: f32, x: &[f32], y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn scale_f64(a: f64, x: &[f64], y: &mut [f64]);

#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn axpy_f64(a: f64, x: &[f64], y: &mut [f64]);

#[kernel(cuda = ELEMENTWISE)]
pub unsafe fn spin_then_write_u32(cycles: u64, value: u32, y: &mut [u32]);

#[kernel(cuda = REDUCE)]
pub unsafe fn sum_partials_f32(x: &[f32], partials: &mut [f32]);
#[kernel(cuda = REDUCE)]
pub unsafe fn sum_partials_f64(x: &[f64], partials: &mut [f64]);
#[kernel(cuda = REDUCE)]
pub unsafe fn dot_partials_f32(x: &[f32], y: &[f32], partials: &mut [f32]);
#[kernel(cuda = REDUCE)]
pub unsafe fn dot_partials_f64(x: &[f64], y: &[f64], partials: &mut [f64]);
#[kernel(cuda = REDUCE)]
pub unsafe fn final_sum_f32(partials: &[f32], out: &mut [f32]);
#[kernel(cuda = REDUCE)]
pub unsafe fn final_sum_f64(partials: &[f64], out: &mut [f64]);

#[kernel(cuda = TRANSPOSE)]
pub unsafe fn transpose_f32(input: &[f32], output: &mut [f32], rows: u32, cols: u32);

#[kernel(cuda = SGEMM)]
pub unsafe fn sgemm_tiled(
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
);
