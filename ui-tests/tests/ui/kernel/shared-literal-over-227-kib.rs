//! Declaring that a kernel needs 300000 bytes of dynamic shared memory.
//!
//! No CUDA device gives a block more than 232448 bytes (227 KiB) of shared memory, so
//! every launch would be refused.
use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void reverse_blocks_f32(const float* x, size_t x_len, float* y, size_t y_len) {
    extern __shared__ float tile[];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < x_len ? x[i] : 0.0f;
    __syncthreads();
    size_t j = blockIdx.x * (size_t)blockDim.x + (blockDim.x - 1 - threadIdx.x);
    if (j < y_len) y[j] = tile[threadIdx.x];
}"#;

#[kernel(cuda = SRC, block = 256, shared = 300000)]
unsafe fn reverse_blocks_f32(x: &[f32], y: &mut [f32]);

fn main() {}
