//! Declaring the dynamic shared memory with a `usize` constant.
//!
//! `shared = EXPR` is the byte count as a `u32`, as `LaunchConfig::shared_mem_bytes`
//! is: the compiler points at the expression.
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

const TILE_BYTES: usize = 4 * 256;

#[kernel(cuda = SRC, block = 256, shared = TILE_BYTES)]
unsafe fn reverse_blocks_f32(x: &[f32], y: &mut [f32]);

fn main() {}
