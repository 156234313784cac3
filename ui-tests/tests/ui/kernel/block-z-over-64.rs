//! Declaring a block of 65 threads in z.
//!
//! No CUDA device launches more than 64 threads in z.
use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
block_sums_f32(const float* x, size_t x_len, float* sums, size_t sums_len) {
    __shared__ float partial[256];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < x_len ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && blockIdx.x < sums_len) sums[blockIdx.x] = partial[0];
}"#;

#[kernel(cuda = SRC, block = (4, 4, 65))]
unsafe fn block_sums_f32(x: &[f32], sums: &mut [f32]);

fn main() {}
