//! Declaring `max_threads = 2048`.
//!
//! No CUDA device launches more than 1024 threads per block: the bound promises
//! nothing a launch could use, and probably means the kernel was written for another
//! shape than the author thinks.
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

#[kernel(cuda = SRC, max_threads = 2048, shared = |(x, y, z)| 4 * x * y * z)]
unsafe fn reverse_blocks_f32(x: &[f32], y: &mut [f32]);

fn main() {}
