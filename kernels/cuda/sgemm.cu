// Shared-memory tiled SGEMM, row-major: C = alpha * A * B + beta * C with A m x k,
// B k x n, C m x n. Each 256-thread block computes a 64x64 tile of C, stepping through
// k in slices of 16 staged in shared memory; each thread accumulates a 4x4 register
// tile whose rows and columns are 16 apart, so that shared-memory reads are broadcasts
// or consecutive (no bank conflicts) and global writes are coalesced. Edges of shapes
// that are not multiples of the tile are zero-padded on load and masked on store.
// Nothing is computed unless the slices hold m*k, k*n and m*n elements.

#define BM 64
#define BN 64
#define BK 16
// Declared for blocks of exactly THREADS threads in x (`#[kernel(block = 256)]` in
// ../src/declarations.rs): a thread's rows `ty + 16 * i` stay within the A tile only
// for threadIdx.x < THREADS.
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_tiled(unsigned m, unsigned n, unsigned k, float alpha, const float* a, size_t a_len,
            const float* b, size_t b_len, float beta, float* c, size_t c_len) {
    if ((size_t)m * k > a_len || (size_t)k * n > b_len || (size_t)m * n > c_len) return;
    __shared__ float as[BK][BM + 4];  // A tile, transposed: as[kk][row]
    __shared__ float bs[BK][BN];      // B tile: bs[kk][col]
    const unsigned tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const unsigned row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[4][4] = {};
    for (unsigned k0 = 0; k0 < k; k0 += BK) {
        for (unsigned i = threadIdx.x; i < BM * BK; i += THREADS) {
            unsigned r = i / BK, kk = i % BK, gr = row0 + r, gk = k0 + kk;
            as[kk][r] = (gr < m && gk < k) ? a[(size_t)gr * k + gk] : 0.0f;
        }
        for (unsigned i = threadIdx.x; i < BK * BN; i += THREADS) {
            unsigned kk = i / BN, col = i % BN, gk = k0 + kk, gc = col0 + col;
            bs[kk][col] = (gk < k && gc < n) ? b[(size_t)gk * n + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (unsigned kk = 0; kk < BK; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        unsigned r = row0 + ty + 16 * i;
        if (r >= m) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            unsigned col = col0 + tx + 16 * j;
            if (col >= n) continue;
            size_t idx = (size_t)r * n + col;
            float prior = beta == 0.0f ? 0.0f : beta * c[idx];  // beta == 0: C may be uninitialised
            c[idx] = alpha * acc[i][j] + prior;
        }
    }
}
