//! Every form of the launch-shape arguments of `#[kernel]` compiles: `block` with one,
//! two and three dimensions, `max_threads`, and `shared` as a literal, as a constant
//! expression and as a closure over the block (coerced to a function pointer in the
//! kernel's `static`), and the wrappers are called like any other.
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

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
}

extern "C" __global__ void __launch_bounds__(512)
reverse_blocks_f32(const float* x, size_t x_len, float* y, size_t y_len) {
    extern __shared__ float tile[];
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned n = blockDim.x * blockDim.y * blockDim.z;
    size_t i = blockIdx.x * (size_t)n + t;
    tile[t] = i < x_len ? x[i] : 0.0f;
    __syncthreads();
    size_t j = blockIdx.x * (size_t)n + (n - 1 - t);
    if (j < y_len) y[j] = tile[t];
}
"#;

/// Bytes of the shared tile of a 32 x 8 x 2 block of `f32`.
const TILE_BYTES: u32 = 4 * 32 * 8 * 2;

#[kernel(cuda = SRC, block = 256)]
unsafe fn block_sums_f32(x: &[f32], sums: &mut [f32]);

#[kernel(cuda = SRC, name = "block_sums_f32", block = (256, 1))]
unsafe fn block_sums_2d(x: &[f32], sums: &mut [f32]);

#[kernel(cuda = SRC, name = "block_sums_f32", block = (256, 1, 1), shared = 0)]
unsafe fn block_sums_3d(x: &[f32], sums: &mut [f32]);

#[kernel(cuda = SRC, max_threads = 512, shared = |(x, y, z)| 4 * x * y * z)]
unsafe fn reverse_blocks_f32(x: &[f32], y: &mut [f32]);

#[kernel(
    cuda = SRC,
    name = "reverse_blocks_f32",
    block = (32, 8, 2),
    shared = TILE_BYTES + 0 * 4,
)]
unsafe fn reverse_tiles(x: &[f32], y: &mut [f32]);

#[kernel(cuda = SRC, name = "reverse_blocks_f32", block = (16, 16), shared = 1024u32)]
unsafe fn reverse_16x16(x: &[f32], y: &mut [f32]);

fn run(stream: &Stream) -> Result<(), Error> {
    let input = vec![1.0f32; 512];
    let mut out = vec![0.0f32; 512];
    scope(stream, |s| {
        let x = s.upload(&input)?;
        let mut sums = s.alloc_zeroed::<f32>(2)?;
        let mut y = s.alloc_zeroed::<f32>(512)?;
        let blocks = LaunchConfig::new((2, 1, 1), (256, 1, 1));
        block_sums_f32(s, blocks, &x, &mut sums)?;
        block_sums_2d(s, blocks, &x, &mut sums)?;
        block_sums_3d(s, blocks, &x, &mut sums)?;
        reverse_blocks_f32(s, blocks.with_shared_mem(1024), &x, &mut y)?;
        let tiles = LaunchConfig::new((1, 1, 1), (32, 8, 2)).with_shared_mem(TILE_BYTES);
        reverse_tiles(s, tiles, &x, &mut y)?;
        let square = LaunchConfig::new((2, 1, 1), (16, 16, 1)).with_shared_mem(1024);
        reverse_16x16(s, square, &x, &mut y)?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })
}

fn main() {
    let _ = run;
}
