// The tiled SGEMM for operands as stored (sgemm_tiles.cuh precedes this file): one pass,
// or k split among the grid's z blocks and the ranges summed. Nothing is computed unless
// the slices hold m*k, k*n and m*n elements.

// The kernels come in pairs: these for operands as stored (the common case, its code
// alone in its kernel), and sgemm_op.cu's taking `ops` for the transposed forms. One
// kernel holding every form cost the untransposed one 5% (2048^3 on an H100: 37.5
// against 39.6 TFLOP/s, the same machine), its registers shared with the others'.

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_tiled(unsigned m32, unsigned n32, unsigned k32, float alpha, const float* a,
            size_t a_len, const float* b, size_t b_len, float beta, float* c, size_t c_len) {
    const size_t m = m32, n = n32, k = k32;
    if (m * k > a_len || k * n > b_len || m * n > c_len) return;
    __shared__ __align__(16) Staging st;
    gemm_tiles<false, false>(m, n, k, 0, k, 0, a, b, alpha, beta, c, st);
}

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_split_k(unsigned m32, unsigned n32, unsigned k32, unsigned chunk32, const float* a,
              size_t a_len, const float* b, size_t b_len, float* partials,
              size_t partials_len) {
    const size_t m = m32, n = n32, k = k32, chunk = chunk32;
    size_t k_begin, k_end, offset;
    if (!split_range(m, n, k, chunk, a_len, b_len, partials_len, &k_begin, &k_end, &offset))
        return;
    __shared__ __align__(16) Staging st;
    gemm_tiles<false, false>(m, n, k, k_begin, k_end, chunk, a, b, 1.0f, 0.0f,
                             partials + offset, st);
}

// c = alpha * (sum over z of partials[z * m * n..][..m * n], added in z order) + beta * c
// (c not read when beta == 0). Nothing is computed unless `partials` holds `splits`
// slices of m * n and `c` holds m * n.
extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_split_k_sum(unsigned m32, unsigned n32, unsigned splits, float alpha,
                  const float* partials, size_t partials_len, float beta, float* c,
                  size_t c_len) {
    const size_t mn = (size_t)m32 * n32;
    if (splits == 0 || mn > c_len || mn > partials_len / splits) return;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < mn; i += stride) {
        float sum = 0.0f;
        for (unsigned z = 0; z < splits; ++z) sum += partials[z * mn + i];
        c[i] = alpha * sum + (beta == 0.0f ? 0.0f : beta * c[i]);
    }
}
