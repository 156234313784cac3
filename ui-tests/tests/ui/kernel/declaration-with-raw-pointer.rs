//! Declaring a kernel parameter as a raw pointer.
//!
//! A raw pointer carries neither a length nor a brand, so the wrapper could not check
//! that it is device memory of the scope, or bound the kernel's accesses. Declare
//! `&[T]` (read) or `&mut [T]` (written): each becomes a pointer and a `size_t` length
//! on the CUDA side.
use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void scale_f32(float a, float* y) {
    y[blockIdx.x * blockDim.x + threadIdx.x] *= a;
}"#;

#[kernel(cuda = SRC)]
pub unsafe fn scale_f32(a: f32, y: *mut f32);

fn main() {}
