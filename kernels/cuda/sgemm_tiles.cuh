// Shared-memory tiled SGEMM, row-major: C = alpha * op(A) * op(B) + beta * C with op(A)
// m x k, op(B) k x n, C m x n: what the kernels of sgemm.cu (one pass) and
// sgemm_split_k.cu share. This file precedes each of them in its module, and two #defines
// precede it, A_TRANSPOSED and B_TRANSPOSED, which name the module's form of the operands
// (../src/declarations.rs). A module per kernel and form, each compiled at its first
// launch, so that a program waits only for the forms it uses: NVRTC took about 0.5 s for
// each on an H200 host, against 0.9 s for the one-pass and split-k kernels together and
// 3.4 s for the three transposed forms of both (2026-11-28, CUDA's cache off).
//
// `sgemm_tiled` computes C in one pass. For a C of few tiles and a long k, which would
// leave most multiprocessors idle, `sgemm_split_k` splits k among the grid's z blocks:
// block z multiplies k range [z * chunk, (z + 1) * chunk) into its own m x n slice of
// `partials`, and `sgemm_split_k_sum` then adds the slices in z order (so the result is
// the same at every run) and applies alpha and beta.
//
// Each 256-thread block computes a 128x128 tile of C, stepping through k in slices of 8
// staged in shared memory, two slices deep: while the block computes on one slice, each
// thread already holds its part of the next one in registers and stores it into the
// other buffer afterwards, so one barrier per slice suffices. Each thread accumulates an
// 8x8 register tile made of four 4x4 quarters 64 rows and 64 columns apart: its shared
// reads are 16-byte vectors that a warp reads as broadcasts or as 256 consecutive bytes
// (no bank conflicts), and 64 multiply-adds follow every four of them.
//
// The grid's y dimension is capped (65535 blocks): a block computes row tiles blockIdx.y,
// blockIdx.y + gridDim.y, ... so that any m has a valid launch shape.
//
// Row, column and k positions are 64-bit: with m, n or k near 2^32, a 32-bit `row0 + BM`
// or `k0 + BK` would wrap (a wrong bound check, or a k loop that never ends).
//
// Loads are 16-byte vectors where the slice lies inside the matrix and the rows are
// 16-byte aligned (the stored row length a multiple of 4 and the pointer aligned); elsewhere
// (edges of shapes that are not multiples of the tile, a k that is not a multiple of 8,
// views at odd offsets) they are scalar, zero-padded outside the matrix. Stores are
// masked the same way. A tile wholly inside both matrices loads its whole slices from
// running offsets, without those checks: on an H200 at 4096^3 that took the kernel from
// 42.2 to 46.7 TFLOP/s, 0.83x to 0.92x cuBLAS (FFMA from 71% to 87% of the instructions
// executed, 2026-11-28).

#if !defined(A_TRANSPOSED) || !defined(B_TRANSPOSED)
#error "#define A_TRANSPOSED and B_TRANSPOSED (true or false) before sgemm_tiles.cuh"
#endif

#define BM 128
#define BN 128
#define BK 8
// Tile rows padded by 4 floats: the transposed stores of a warp (A as stored, a
// transposed B) then fall in distinct banks, and rows stay 16-byte aligned.
#define AS_STRIDE (BM + 4)
#define BS_STRIDE (BN + 4)
// Declared for blocks of exactly THREADS threads in x (`#[kernel(block = 256)]` in
// ../src/declarations.rs): the load and compute mappings below cover the tiles only
// for threadIdx.x < THREADS.
#define THREADS 256

// Four consecutive floats of row `row` of a row-major matrix of `stride` floats per row,
// from column `col`: one 16-byte load when `vector` (the caller checked bounds and
// alignment), else scalar loads, zero outside `rows x cols` (the matrix, or the part of
// it a split-k block covers).
__device__ __forceinline__ void load4(const float* base, size_t row, size_t col, size_t rows,
                                      size_t cols, size_t stride, bool vector, float* out) {
    if (vector) {
        const float4 v = *reinterpret_cast<const float4*>(base + row * stride + col);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q)
            out[q] = (row < rows && col + q < cols) ? base[row * stride + col + q] : 0.0f;
    }
}

// The two ways of loading one operand's slice into registers, 4 floats per thread, as
// 16-byte loads where the whole slice lies inside the matrix and its rows are aligned:
// "across k" reads 128 stored rows (the tile's rows of A, or columns of a transposed B)
// by 8 columns of k, thread `t` row `t / 2` at k offsets `(t % 2) * 4 + 0..3`; "along k"
// reads 8 stored rows of k (B, or a transposed A) by 128 columns, thread `t` row `t / 32`
// at columns `(t % 32) * 4 + 0..3`. `lines` is the stored rows' bound (m or n), `k_end`
// the end of k that this block covers, `k` the stored row length when k is the column.
__device__ __forceinline__ void load_across_k(const float* x, size_t line0, size_t lines,
                                              size_t k0, size_t k_end, size_t k, bool vec,
                                              float* out) {
    const unsigned t = threadIdx.x;
    const bool inside = line0 + BM <= lines && k0 + BK <= k_end;
    load4(x, line0 + t / 2, k0 + (t % 2) * 4, lines, k_end, k, vec && inside, out);
}

__device__ __forceinline__ void load_along_k(const float* x, size_t line0, size_t lines,
                                             size_t k0, size_t k_end, bool vec, float* out) {
    const unsigned t = threadIdx.x;
    const bool inside = line0 + BN <= lines && k0 + BK <= k_end;
    load4(x, k0 + t / 32, line0 + (t % 32) * 4, k_end, lines, lines, vec && inside, out);
}

// One slice of op(A) (rows row0.., k0..) and op(B) (k0.., columns col0..) into registers.
template <bool TA, bool TB>
__device__ __forceinline__ void load_slice(size_t m, size_t n, size_t k, size_t k_end,
                                           const float* a, const float* b, size_t row0,
                                           size_t col0, size_t k0, bool a_vec, bool b_vec,
                                           float* ra, float* rb) {
    if (TA) load_along_k(a, row0, m, k0, k_end, a_vec, ra);
    else load_across_k(a, row0, m, k0, k_end, k, a_vec, ra);
    if (TB) load_across_k(b, col0, n, k0, k_end, k, b_vec, rb);
    else load_along_k(b, col0, n, k0, k_end, b_vec, rb);
}

// Stores what `load_slice` loaded as as[kk][row] and bs[kk][col]: what was read across k
// is transposed (4 scalar stores), what was read along k is stored as it is (one 16-byte
// store).
template <bool TA, bool TB>
__device__ __forceinline__ void store_slice(float (*as)[AS_STRIDE], float (*bs)[BS_STRIDE],
                                            const float* ra, const float* rb) {
    const unsigned t = threadIdx.x;
    if (TA) {
        const float4 v = {ra[0], ra[1], ra[2], ra[3]};
        *reinterpret_cast<float4*>(&as[t / 32][(t % 32) * 4]) = v;
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) as[(t % 2) * 4 + q][t / 2] = ra[q];
    }
    if (TB) {
#pragma unroll
        for (int q = 0; q < 4; ++q) bs[(t % 2) * 4 + q][t / 2] = rb[q];
    } else {
        const float4 v = {rb[0], rb[1], rb[2], rb[3]};
        *reinterpret_cast<float4*>(&bs[t / 32][(t % 32) * 4]) = v;
    }
}

// A slice's loads for a tile and slice wholly inside the matrices, with aligned rows:
// one 16-byte load per operand at running offsets, with no bounds or index arithmetic
// (that arithmetic, 64-bit and predicated, was a fifth of the kernel's instructions).
// Each thread starts where `load_slice` would read slice `k_begin` and steps a slice per
// `load`; the caller loads only whole slices that lie inside.
template <bool TA, bool TB>
struct InsideCursor {
    const float* a;
    const float* b;
    size_t a_at, b_at, a_step, b_step;

    __device__ __forceinline__ InsideCursor(size_t m, size_t n, size_t k, size_t k_begin,
                                            const float* a, const float* b, size_t row0,
                                            size_t col0)
        : a(a), b(b) {
        const unsigned t = threadIdx.x;
        a_at = TA ? (k_begin + t / 32) * m + row0 + (t % 32) * 4
                  : (row0 + t / 2) * k + k_begin + (t % 2) * 4;
        b_at = TB ? (col0 + t / 2) * k + k_begin + (t % 2) * 4
                  : (k_begin + t / 32) * n + col0 + (t % 32) * 4;
        a_step = TA ? BK * m : BK;
        b_step = TB ? BK : BK * n;
    }

    __device__ __forceinline__ void load(float* ra, float* rb) {
        const float4 va = *reinterpret_cast<const float4*>(a + a_at);
        const float4 vb = *reinterpret_cast<const float4*>(b + b_at);
        ra[0] = va.x; ra[1] = va.y; ra[2] = va.z; ra[3] = va.w;
        rb[0] = vb.x; rb[1] = vb.y; rb[2] = vb.z; rb[3] = vb.w;
        a_at += a_step;
        b_at += b_step;
    }
};

// Accumulates into `acc` this thread's 8x8 part of the slices [k_begin, k_end) (at least
// one), each loaded by `load(k0, ra, rb)`. Every shared-memory access is followed by a
// barrier before the function returns, so the buffers may be reused at once.
template <bool TA, bool TB, class Load>
__device__ __forceinline__ void run_slices(size_t k_begin, size_t k_end, Load load,
                                           float (*as)[BK][AS_STRIDE],
                                           float (*bs)[BK][BS_STRIDE], float (&acc)[8][8]) {
    const unsigned tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float ra[4], rb[4];
    load(k_begin, ra, rb);
    store_slice<TA, TB>(as[0], bs[0], ra, rb);
    __syncthreads();
    unsigned cur = 0;
    for (size_t k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool next = k0 + BK < k_end;
        if (next) load(k0 + BK, ra, rb);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&as[cur][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&as[cur][kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&bs[cur][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&bs[cur][kk][64 + tx * 4]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
        }
        // The other buffer was last read before the previous barrier: safe to fill.
        if (next) store_slice<TA, TB>(as[cur ^ 1], bs[cur ^ 1], ra, rb);
        __syncthreads();
        cur ^= 1;
    }
}

// This thread's 8x8 part of the tile at (row0, col0) of A[:, k_begin..k_end] *
// B[k_begin..k_end, :], into `acc`. A tile wholly inside the matrices, with aligned rows,
// runs its whole slices on an `InsideCursor` and only a k tail through `load_slice`'s
// checks: two loops, so that the checked path (which the compiler predicates rather than
// branches around) costs nothing in the other.
template <bool TA, bool TB>
__device__ __forceinline__ void tile_product(size_t m, size_t n, size_t k, size_t k_begin,
                                             size_t k_end, const float* a, const float* b,
                                             size_t row0, size_t col0, bool a_vec, bool b_vec,
                                             float (*as)[BK][AS_STRIDE], float (*bs)[BK][BS_STRIDE],
                                             float (&acc)[8][8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
    if (k_begin >= k_end) return;
    const auto checked = [&](size_t k0, float* ra, float* rb) {
        load_slice<TA, TB>(m, n, k, k_end, a, b, row0, col0, k0, a_vec, b_vec, ra, rb);
    };
    const bool inside = a_vec && b_vec && row0 + BM <= m && col0 + BN <= n;
    const size_t k_whole = k_begin + (k_end - k_begin) / BK * BK;
    if (inside && k_whole > k_begin) {
        InsideCursor<TA, TB> cursor(m, n, k, k_begin, a, b, row0, col0);
        const auto next_slice = [&](size_t, float* ra, float* rb) { cursor.load(ra, rb); };
        run_slices<TA, TB>(k_begin, k_whole, next_slice, as, bs, acc);
        if (k_whole < k_end) run_slices<TA, TB>(k_whole, k_end, checked, as, bs, acc);
    } else {
        run_slices<TA, TB>(k_begin, k_end, checked, as, bs, acc);
    }
}

// Writes this thread's part of the tile at (row0, col0): c = alpha * acc + beta * c, with
// 16-byte stores where `c_vec` and the row holds them; c is not read when beta == 0 (it
// may be uninitialised).
__device__ __forceinline__ void store_tile(float* c, size_t m, size_t n, size_t row0,
                                           size_t col0, float alpha, float beta, bool c_vec,
                                           const float (&acc)[8][8]) {
    const unsigned tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const size_t r = row0 + (i < 4 ? 0 : 64) + ty * 4 + (i % 4);
        if (r >= m) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const size_t col = col0 + half * 64 + tx * 4;
            const size_t idx = r * n + col;
            float out[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) out[q] = alpha * acc[i][half * 4 + q];
            if (c_vec && col + 4 <= n) {
                float4* p = reinterpret_cast<float4*>(c + idx);
                if (beta != 0.0f) {
                    const float4 prior = *p;
                    out[0] += beta * prior.x; out[1] += beta * prior.y;
                    out[2] += beta * prior.z; out[3] += beta * prior.w;
                }
                const float4 v = {out[0], out[1], out[2], out[3]};
                *p = v;
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if (col + q >= n) break;
                    const float prior = beta == 0.0f ? 0.0f : beta * c[idx + q];
                    c[idx + q] = out[q] + prior;
                }
            }
        }
    }
}

__device__ __forceinline__ bool aligned16(const float* p) {
    return (reinterpret_cast<size_t>(p) & 15) == 0;
}

// Whether a stored operand's rows allow 16-byte loads: `row_len` floats long (a multiple
// of 4) from an aligned start, and for a split-k block whose rows are of k, starting at
// a multiple of 4 (`chunk`).
__device__ __forceinline__ bool rows_aligned(const float* x, size_t row_len, size_t start) {
    return row_len % 4 == 0 && start % 4 == 0 && aligned16(x);
}

// The block's shared staging of A and B slices, two deep, declared by each kernel and
// lent to `gemm_tiles`.
struct Staging {
    float as[2][BK][AS_STRIDE];
    float bs[2][BK][BS_STRIDE];
};

// C's tiles of this block (row tiles blockIdx.y, blockIdx.y + gridDim.y, ..., columns
// blockIdx.x) over k range [k_begin, k_end), into c as alpha * product + beta * c.
template <bool TA, bool TB>
__device__ __forceinline__ void gemm_tiles(size_t m, size_t n, size_t k, size_t k_begin,
                                           size_t k_end, size_t chunk, const float* a,
                                           const float* b, float alpha, float beta, float* c,
                                           Staging& st) {
    const size_t col0 = (size_t)blockIdx.x * BN;
    // A stored m x k (k the row) or k x m; B stored k x n or n x k (k the row).
    const bool a_vec = TA ? rows_aligned(a, m, 0) : rows_aligned(a, k, chunk);
    const bool b_vec = TB ? rows_aligned(b, k, chunk) : rows_aligned(b, n, 0);
    const bool c_vec = n % 4 == 0 && aligned16(c);
    const size_t row_tiles = (m + BM - 1) / BM;
    for (size_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
        float acc[8][8];
        tile_product<TA, TB>(m, n, k, k_begin, k_end, a, b, tile * BM, col0, a_vec, b_vec,
                             st.as, st.bs, acc);
        store_tile(c, m, n, tile * BM, col0, alpha, beta, c_vec, acc);
    }
}

// Block z's part of a split-k product: op(A)[:, z * chunk..] * op(B)[z * chunk.., :] (at
// most `chunk` long) into partials[z * m * n..][..m * n]. Nothing is computed unless
// `partials` holds gridDim.z slices of m * n.
__device__ __forceinline__ bool split_range(size_t m, size_t n, size_t k, size_t chunk,
                                            size_t a_len, size_t b_len, size_t partials_len,
                                            size_t* k_begin, size_t* k_end, size_t* offset) {
    if (m * k > a_len || k * n > b_len || m * n > partials_len / gridDim.z) return false;
    const size_t start = (size_t)blockIdx.z * chunk;
    *k_begin = start < k ? start : k;
    *k_end = k - *k_begin < chunk ? k : *k_begin + chunk;
    *offset = (size_t)blockIdx.z * m * n;
    return true;
}

