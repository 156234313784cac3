//! Launch shapes are part of a `#[kernel]` declaration's contract
//! (`stream-core/src/kernel/shape.rs`), on a real GPU.
//!
//! Kernels declared here with fixed-size `__shared__` tiles (`block = 256`,
//! `block = (32, 8)`, `max_threads = 512`) and with `extern __shared__` memory (a
//! `shared` constant and a `shared` rule on the block) are exact at every shape their
//! declaration admits; every other shape (a wrong `block.x`, `y` or `z`, too many
//! threads, too little dynamic shared memory, and the issue's own 1024-thread launch of
//! a 256-thread reduction) is an `InvalidLaunch` naming the declaration, refused before
//! the kernel is even compiled, and nothing runs: the poisoned outputs are untouched
//! after the scope. (The `kernels` crate's wrappers at their declared shapes are tested
//! in `test_kernels.rs`, parameter-name hygiene in `test_kernel_hygiene.rs`.)
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference bit for bit.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, check_error, ensure, expect_err, poisoned, stream, transposed, Rng, TestResult,
};
use stream_core::{kernel, scope, Error, LaunchConfig, LaunchLimit};

gpu_tests::test_main! {
    gpu: [
        fixed_shared_tile_kernels_are_exact_at_their_declared_block,
        max_threads_kernel_is_exact_for_every_admitted_block,
        dynamic_shared_memory_kernels_are_exact_with_enough_shared_memory,
        block_violations_are_invalid_launch_naming_the_declaration_and_launch_nothing,
        too_little_dynamic_shared_memory_is_invalid_launch_and_launches_nothing,
        shape_is_checked_before_the_kernel_is_compiled,
    ],
}

// ---------------------------------------------------------------------------------------
// Kernels declared in this file.

/// Kernels whose `__shared__` memory is sized for one block shape, or for a number of
/// threads, or by the launch (`extern __shared__`). Each carries the
/// `__launch_bounds__` of its declaration.
const SHAPED_SRC: &str = r#"
// sums[b] = x[256 b] + ... + x[256 b + 255] (wrapping), one block of exactly 256 threads
// per sum: `partial` has 256 elements, indexed by threadIdx.x.
extern "C" __global__ void __launch_bounds__(256)
block_sums_u32(const unsigned* x, size_t x_len, unsigned* sums, size_t sums_len) {
    __shared__ unsigned partial[256];
    size_t i = blockIdx.x * (size_t)256 + threadIdx.x;
    partial[threadIdx.x] = i < x_len ? x[i] : 0u;
    __syncthreads();
    for (unsigned stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0 && blockIdx.x < sums_len) sums[blockIdx.x] = partial[0];
}

// out = in^T (in: rows x cols), 32x32 tiles moved by blocks of exactly 32x8 threads:
// `tile[threadIdx.y + j]` with j up to 24 stays in the tile only for threadIdx.y < 8.
extern "C" __global__ void __launch_bounds__(256)
transpose_tile_u32(const unsigned* in, size_t in_len, unsigned* out, size_t out_len,
                   unsigned rows, unsigned cols) {
    if ((size_t)rows * cols > in_len || (size_t)rows * cols > out_len) return;
    __shared__ unsigned tile[32][33];
    unsigned x = blockIdx.x * 32 + threadIdx.x;
    unsigned y = blockIdx.y * 32 + threadIdx.y;
    for (unsigned j = 0; j < 32; j += 8) {
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    }
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (unsigned j = 0; j < 32; j += 8) {
        if (x < rows && y + j < cols) out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
    }
}

// Each block of n = x*y*z threads reverses its n elements: y[b n + n-1-t] = x[b n + t]
// (0 past the end of x). `tile` has 512 elements: any block of at most 512 threads.
extern "C" __global__ void __launch_bounds__(512)
reverse_blocks_u32(const unsigned* x, size_t x_len, unsigned* y, size_t y_len) {
    __shared__ unsigned tile[512];
    unsigned n = blockDim.x * blockDim.y * blockDim.z;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    size_t base = (size_t)blockIdx.x * n;
    tile[t] = base + t < x_len ? x[base + t] : 0u;
    __syncthreads();
    size_t j = base + (n - 1 - t);
    if (j < y_len) y[j] = tile[t];
}

// The same with the tile in dynamic shared memory: 4 n bytes for a block of n threads.
extern "C" __global__ void __launch_bounds__(1024)
reverse_dynamic_u32(const unsigned* x, size_t x_len, unsigned* y, size_t y_len) {
    extern __shared__ unsigned tile[];
    unsigned n = blockDim.x * blockDim.y * blockDim.z;
    unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    size_t base = (size_t)blockIdx.x * n;
    tile[t] = base + t < x_len ? x[base + t] : 0u;
    __syncthreads();
    size_t j = base + (n - 1 - t);
    if (j < y_len) y[j] = tile[t];
}

// Each block of exactly 256 threads rotates its 256 elements by one through a ring of
// 256 elements in dynamic shared memory: y[b 256 + t] = x[b 256 + (t + 1) % 256].
extern "C" __global__ void __launch_bounds__(256)
rotate_blocks_u32(const unsigned* x, size_t x_len, unsigned* y, size_t y_len) {
    extern __shared__ unsigned ring[];
    size_t base = (size_t)blockIdx.x * 256;
    ring[threadIdx.x] = base + threadIdx.x < x_len ? x[base + threadIdx.x] : 0u;
    __syncthreads();
    size_t j = base + threadIdx.x;
    if (j < y_len) y[j] = ring[(threadIdx.x + 1) % 256];
}
"#;

#[kernel(cuda = SHAPED_SRC, block = 256)]
/// `sums[b]` = the wrapping sum of `x[256 b .. 256 b + 256]`.
unsafe fn block_sums_u32(x: &[u32], sums: &mut [u32]);

#[kernel(cuda = SHAPED_SRC, block = (32, 8))]
/// `output = input^T`, `input` is `rows x cols`.
unsafe fn transpose_tile_u32(input: &[u32], output: &mut [u32], rows: u32, cols: u32);

#[kernel(cuda = SHAPED_SRC, max_threads = 512)]
/// Reverses each block's elements, through a fixed tile of 512.
unsafe fn reverse_blocks_u32(x: &[u32], y: &mut [u32]);

#[kernel(
    cuda = SHAPED_SRC,
    max_threads = 1024,
    shared = |(x, y, z)| 4 * x * y * z
)]
/// Reverses each block's elements, through dynamic shared memory.
unsafe fn reverse_dynamic_u32(x: &[u32], y: &mut [u32]);

/// The ring of `rotate_blocks_u32`: 256 `unsigned`.
const RING_BYTES: u32 = 256 * 4;

#[kernel(cuda = SHAPED_SRC, block = 256, shared = RING_BYTES)]
/// Rotates each block's 256 elements by one.
unsafe fn rotate_blocks_u32(x: &[u32], y: &mut [u32]);

/// A syntax error: the module never compiles.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(256) never_compiles(unsigned* y, size_t y_len) {
    if (y_len > 0) y[0] = ;
}
"#;

#[kernel(cuda = BROKEN_SRC, block = 256)]
/// Never compiles.
unsafe fn never_compiles(y: &mut [u32]);

// ---------------------------------------------------------------------------------------
// CPU references.

/// `sums[b]` = the wrapping sum of the `b`-th run of 256 elements.
fn block_sums_reference(x: &[u32]) -> Vec<u32> {
    x.chunks(256)
        .map(|chunk| chunk.iter().fold(0u32, |a, &v| a.wrapping_add(v)))
        .collect()
}

/// Each run of `n` elements reversed, reading 0 past the end of `x`.
fn reverse_reference(x: &[u32], n: usize) -> Vec<u32> {
    let mut y = vec![0u32; x.len()];
    for (j, out) in y.iter_mut().enumerate() {
        let (base, t) = (j / n * n, n - 1 - j % n);
        *out = x.get(base + t).copied().unwrap_or(0);
    }
    y
}

/// Each run of 256 elements rotated by one, reading 0 past the end of `x`.
fn rotate_reference(x: &[u32]) -> Vec<u32> {
    (0..x.len())
        .map(|j| {
            x.get(j / 256 * 256 + (j % 256 + 1) % 256)
                .copied()
                .unwrap_or(0)
        })
        .collect()
}

/// Blocks of `block` covering `n` elements, with `shared` bytes of dynamic shared
/// memory.
fn covering(n: usize, block: (u32, u32, u32), shared: u32) -> LaunchConfig {
    let threads = (block.0 * block.1 * block.2) as usize;
    let grid = u32::try_from(n.div_ceil(threads)).unwrap_or(u32::MAX);
    LaunchConfig::new((grid, 1, 1), block).with_shared_mem(shared)
}

// ---------------------------------------------------------------------------------------
// Admitted shapes.

/// `block = 256` with `__shared__ unsigned partial[256]`, and `block = (32, 8)` with a
/// 32x33 tile, at their declared blocks: exact, including partial last blocks and tiles.
fn fixed_shared_tile_kernels_are_exact_at_their_declared_block() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for n in [1, 256, 257, 100_003] {
        let x: Vec<u32> = rng.vec(n);
        let blank = poisoned::<u32>(n.div_ceil(256));
        let mut sums = poisoned::<u32>(n.div_ceil(256));
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dsums = s.upload(&blank)?;
            block_sums_u32(s, covering(n, (256, 1, 1), 0), &dx, &mut dsums)?;
            s.copy_to_host(&dsums, &mut sums)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("block sums of {n} u32"),
            &block_sums_reference(&x),
            &sums,
        )?;
    }
    for (rows, cols) in [(1, 1), (31, 33), (100, 70), (512, 1000)] {
        let x: Vec<u32> = rng.vec(rows * cols);
        let blank = poisoned::<u32>(rows * cols);
        let mut out = poisoned::<u32>(rows * cols);
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dt = s.upload(&blank)?;
            let tiles = LaunchConfig::for_2d(cols, rows, (32, 32));
            let config = LaunchConfig {
                block: (32, 8, 1),
                ..tiles
            };
            transpose_tile_u32(s, config, &dx, &mut dt, rows as u32, cols as u32)?;
            s.copy_to_host(&dt, &mut out)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("transpose of {rows}x{cols}"),
            &transposed(&x, rows, cols),
            &out,
        )?;
    }
    Ok(())
}

/// `max_threads = 512` with `__shared__ unsigned tile[512]`: every block of at most 512
/// threads, in one, two or three dimensions, reverses its elements exactly.
fn max_threads_kernel_is_exact_for_every_admitted_block() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 10_007;
    let blank = poisoned::<u32>(n);
    for block in [(512, 1, 1), (16, 8, 4), (100, 1, 1), (7, 3, 2), (1, 1, 1)] {
        let x: Vec<u32> = rng.vec(n);
        let mut out = poisoned::<u32>(n);
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dy = s.upload(&blank)?;
            reverse_blocks_u32(s, covering(n, block, 0), &dx, &mut dy)?;
            s.copy_to_host(&dy, &mut out)?.wait()?;
            Ok(())
        })?;
        let threads = (block.0 * block.1 * block.2) as usize;
        check_eq(
            &format!("reverse_blocks_u32 with block {block:?}"),
            &reverse_reference(&x, threads),
            &out,
        )?;
    }
    Ok(())
}

/// `shared = RING_BYTES` (a constant) and `shared = |(x, y, z)| 4 * x * y * z` (a rule
/// on the block): exact with exactly the dynamic shared memory they need, and with more.
fn dynamic_shared_memory_kernels_are_exact_with_enough_shared_memory() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 20_011;
    let blank = poisoned::<u32>(n);
    for shared in [RING_BYTES, RING_BYTES + 4096] {
        let x: Vec<u32> = rng.vec(n);
        let mut out = poisoned::<u32>(n);
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dy = s.upload(&blank)?;
            rotate_blocks_u32(s, covering(n, (256, 1, 1), shared), &dx, &mut dy)?;
            s.copy_to_host(&dy, &mut out)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("rotate_blocks_u32 with {shared} bytes"),
            &rotate_reference(&x),
            &out,
        )?;
    }
    for (block, extra) in [
        ((1024, 1, 1), 0),
        ((64, 2, 1), 0),
        ((8, 8, 8), 100),
        ((3, 5, 7), 4),
    ] {
        let x: Vec<u32> = rng.vec(n);
        let mut out = poisoned::<u32>(n);
        let threads = block.0 * block.1 * block.2;
        let shared = 4 * threads + extra;
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dy = s.upload(&blank)?;
            reverse_dynamic_u32(s, covering(n, block, shared), &dx, &mut dy)?;
            s.copy_to_host(&dy, &mut out)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("reverse_dynamic_u32 with block {block:?} and {shared} bytes"),
            &reverse_reference(&x, threads as usize),
            &out,
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Refused shapes.

/// One refused launch: the launch, and the `InvalidLaunch` it must return.
struct Refusal {
    kernel: &'static str,
    what: &'static str,
    value: u64,
    limit: LaunchLimit,
    declared: &'static str,
}

/// Checks that `result` is exactly `refusal`'s `InvalidLaunch`, with a message naming
/// the declaration and what it admits.
fn check_refused(config: LaunchConfig, result: stream_core::Result<()>, r: &Refusal) -> TestResult {
    let what = format!("{} with {config:?}", r.kernel);
    let e = expect_err(&what, result)?;
    let expected = Error::from(stream_core::error::InvalidLaunch {
        kernel: r.kernel,
        what: r.what,
        value: r.value,
        limit: r.limit,
        source_of_limit: r.declared,
    });
    check_error(
        &what,
        &e,
        &expected,
        &[
            &format!("invalid launch of `{}`", r.kernel),
            &format!(
                "{} is {}, but {} admits {}",
                r.what, r.value, r.declared, r.limit
            ),
            "nothing was launched",
        ],
    )
}

/// Every block a declaration does not admit is `InvalidLaunch` naming the declaration,
/// and nothing runs: a wrong `block.x`, `block.y` or `block.z` for `block = 256` and
/// `block = (32, 8)`, the issue's own launch of a 256-thread reduction with 1024
/// threads, and blocks of more than 512 threads for `max_threads = 512`. The poisoned
/// outputs are untouched after the scope; admitted launches afterwards still work.
fn block_violations_are_invalid_launch_naming_the_declaration_and_launch_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 4096;
    let x: Vec<u32> = rng.vec(n);
    let blank = poisoned::<u32>(n);
    let mut outputs = [poisoned::<u32>(n), poisoned::<u32>(n), poisoned::<u32>(n)];
    let sums_at = |block| LaunchConfig::new((16, 1, 1), block);
    let block_sums = |what, value, admitted| Refusal {
        kernel: "block_sums_u32",
        what,
        value,
        limit: LaunchLimit::Exactly(admitted),
        declared: "`#[kernel(block = 256)]` on `block_sums_u32`",
    };
    let transpose = |what, value, admitted| Refusal {
        kernel: "transpose_tile_u32",
        what,
        value,
        limit: LaunchLimit::Exactly(admitted),
        declared: "`#[kernel(block = (32, 8))]` on `transpose_tile_u32`",
    };
    let reverse = |value| Refusal {
        kernel: "reverse_blocks_u32",
        what: "threads per block",
        value,
        limit: LaunchLimit::AtMost(512),
        declared: "`#[kernel(max_threads = 512)]` on `reverse_blocks_u32`",
    };
    let [sums_out, tiles_out, reversed_out] = &mut outputs;
    scope(&stream, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let mut sums = s.upload(&blank)?;
        // The issue: a reduction with `__shared__ partial[256]` launched with 1024
        // threads per block wrote past its tile.
        for (config, refusal) in [
            (
                LaunchConfig::new((1, 1, 1), (1024, 1, 1)),
                block_sums("block.x", 1024, 256),
            ),
            (sums_at((128, 1, 1)), block_sums("block.x", 128, 256)),
            (sums_at((256, 2, 1)), block_sums("block.y", 2, 1)),
            (sums_at((256, 1, 2)), block_sums("block.z", 2, 1)),
            (sums_at((0, 1, 1)), block_sums("block.x", 0, 256)),
        ] {
            check_refused(config, block_sums_u32(s, config, &dx, &mut sums), &refusal)?;
        }
        let mut tiles = s.upload(&blank)?;
        let tile_at = |block| LaunchConfig::new((2, 2, 1), block);
        for (config, refusal) in [
            (tile_at((32, 32, 1)), transpose("block.y", 32, 8)),
            (tile_at((16, 8, 1)), transpose("block.x", 16, 32)),
            (tile_at((32, 8, 2)), transpose("block.z", 2, 1)),
            (tile_at((256, 1, 1)), transpose("block.x", 256, 32)),
        ] {
            let launched = transpose_tile_u32(s, config, &dx, &mut tiles, 64, 64);
            check_refused(config, launched, &refusal)?;
        }
        let mut reversed = s.upload(&blank)?;
        for (block, threads) in [
            ((1024, 1, 1), 1024),
            ((16, 16, 4), 1024),
            ((513, 1, 1), 513),
        ] {
            let config = covering(n, block, 0);
            let launched = reverse_blocks_u32(s, config, &dx, &mut reversed);
            check_refused(config, launched, &reverse(threads))?;
        }
        let _sums = s.copy_to_host(&sums, sums_out)?;
        let _tiles = s.copy_to_host(&tiles, tiles_out)?;
        let _reversed = s.copy_to_host(&reversed, reversed_out)?;
        Ok(())
    })?;
    for (name, out) in ["block_sums_u32", "transpose_tile_u32", "reverse_blocks_u32"]
        .into_iter()
        .zip(&outputs)
    {
        check_eq(
            &format!("{name}'s output after refused launches"),
            &poisoned::<u32>(n),
            out,
        )?;
    }
    // The same kernels at admitted shapes, in a new scope on the same stream.
    let mut sums = poisoned::<u32>(n / 256);
    scope(&stream, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let mut dsums = s.alloc::<u32>(n / 256)?;
        block_sums_u32(s, covering(n, (256, 1, 1), 0), &dx, &mut dsums)?;
        s.copy_to_host(&dsums, &mut sums)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "block sums after the refused launches",
        &block_sums_reference(&x),
        &sums,
    )
}

/// Less dynamic shared memory than the declaration needs is `InvalidLaunch` naming the
/// declaration and the bytes needed, for a `shared` constant and for a `shared` rule on
/// the block, and nothing runs.
fn too_little_dynamic_shared_memory_is_invalid_launch_and_launches_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 4096;
    let x: Vec<u32> = rng.vec(n);
    let blank = poisoned::<u32>(n);
    let (mut rotated_out, mut reversed_out) = (poisoned::<u32>(n), poisoned::<u32>(n));
    let rotate = |value| Refusal {
        kernel: "rotate_blocks_u32",
        what: "dynamic shared memory (bytes)",
        value,
        limit: LaunchLimit::AtLeast(1024),
        declared: "`#[kernel(shared = RING_BYTES)]` on `rotate_blocks_u32`",
    };
    let reverse = |value, needed| Refusal {
        kernel: "reverse_dynamic_u32",
        what: "dynamic shared memory (bytes)",
        value,
        limit: LaunchLimit::AtLeast(needed),
        declared: "`#[kernel(shared = |(x, y, z)| 4 * x * y * z)]` on `reverse_dynamic_u32`",
    };
    scope(&stream, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let mut rotated = s.upload(&blank)?;
        for shared in [0, 4, 1020] {
            let config = covering(n, (256, 1, 1), shared);
            let launched = rotate_blocks_u32(s, config, &dx, &mut rotated);
            check_refused(config, launched, &rotate(u64::from(shared)))?;
        }
        let mut reversed = s.upload(&blank)?;
        for (block, shared) in [
            ((256, 1, 1), 1020),
            ((256, 1, 1), 0),
            ((32, 32, 1), 2048),
            ((4, 4, 4), 255),
        ] {
            let config = covering(n, block, shared);
            let needed = 4 * u64::from(block.0 * block.1 * block.2);
            let launched = reverse_dynamic_u32(s, config, &dx, &mut reversed);
            check_refused(config, launched, &reverse(u64::from(shared), needed))?;
        }
        let _rotated = s.copy_to_host(&rotated, &mut rotated_out)?;
        let _reversed = s.copy_to_host(&reversed, &mut reversed_out)?;
        Ok(())
    })?;
    check_eq(
        "rotate_blocks_u32's output after refused launches",
        &poisoned::<u32>(n),
        &rotated_out,
    )?;
    check_eq(
        "reverse_dynamic_u32's output after refused launches",
        &poisoned::<u32>(n),
        &reversed_out,
    )
}

/// A shape the declaration does not admit is refused before the kernel is loaded: a
/// kernel whose source does not compile gives `InvalidLaunch` for a wrong block, and
/// `KernelCompile` only for an admitted one.
fn shape_is_checked_before_the_kernel_is_compiled() -> TestResult {
    let stream = stream()?;
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc_zeroed::<u32>(16)?;
        let wrong = LaunchConfig::new((1, 1, 1), (1024, 1, 1));
        let refusal = Refusal {
            kernel: "never_compiles",
            what: "block.x",
            value: 1024,
            limit: LaunchLimit::Exactly(256),
            declared: "`#[kernel(block = 256)]` on `never_compiles`",
        };
        check_refused(wrong, never_compiles(s, wrong, &mut y), &refusal)?;
        let admitted = LaunchConfig::new((1, 1, 1), (256, 1, 1));
        let e = expect_err("an admitted launch", never_compiles(s, admitted, &mut y))?;
        ensure!(
            matches!(&e, Error::KernelCompile(failure) if failure.kernel == "never_compiles"),
            "an admitted launch of never_compiles: got {e:?}, expected KernelCompile"
        );
        Ok(())
    })
}
