//! Declaring the shared-memory rule as a closure of two parameters.
//!
//! The rule takes the block `(x, y, z)` as one `(u32, u32, u32)` parameter and returns
//! the bytes the kernel needs as `u32`.
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

#[kernel(cuda = SRC, max_threads = 1024, shared = |x, y| 4 * x * y)]
unsafe fn reverse_blocks_f32(x: &[f32], y: &mut [f32]);

fn main() {}
