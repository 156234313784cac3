// The tiled SGEMM for operands stored transposed (sgemm_tiles.cuh precedes this file):
// the twins of sgemm.cu's `sgemm_tiled` and `sgemm_split_k` taking `ops`, which says which
// operands are stored transposed (BLAS's op): bit 0 for A (stored k x m), bit 1 for B
// (stored n x k). 1, 2 or 3: 0 is sgemm.cu's case, and it and other values compute
// nothing. Nothing is computed unless the slices hold m*k, k*n and m*n elements.

// `gemm_tiles` for the operands' storage `ops` names (bit 0: A transposed, bit 1: B). No
// instantiation for 0: operands as stored go to the plain kernels, which hold theirs alone.
__device__ __forceinline__ void gemm_tiles_for(unsigned ops, size_t m, size_t n, size_t k,
                                               size_t k_begin, size_t k_end, size_t chunk,
                                               const float* a, const float* b, float alpha,
                                               float beta, float* c, Staging& st) {
    switch (ops) {
        case 1: gemm_tiles<true, false>(m, n, k, k_begin, k_end, chunk, a, b, alpha, beta, c, st); break;
        case 2: gemm_tiles<false, true>(m, n, k, k_begin, k_end, chunk, a, b, alpha, beta, c, st); break;
        case 3: gemm_tiles<true, true>(m, n, k, k_begin, k_end, chunk, a, b, alpha, beta, c, st); break;
        default: break;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_tiled_op(unsigned m32, unsigned n32, unsigned k32, unsigned ops, float alpha,
               const float* a, size_t a_len, const float* b, size_t b_len, float beta,
               float* c, size_t c_len) {
    const size_t m = m32, n = n32, k = k32;
    if (m * k > a_len || k * n > b_len || m * n > c_len) return;
    __shared__ __align__(16) Staging st;
    gemm_tiles_for(ops, m, n, k, 0, k, 0, a, b, alpha, beta, c, st);
}

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_split_k_op(unsigned m32, unsigned n32, unsigned k32, unsigned ops, unsigned chunk32,
                 const float* a, size_t a_len, const float* b, size_t b_len, float* partials,
                 size_t partials_len) {
    const size_t m = m32, n = n32, k = k32, chunk = chunk32;
    size_t k_begin, k_end, offset;
    if (!split_range(m, n, k, chunk, a_len, b_len, partials_len, &k_begin, &k_end, &offset))
        return;
    __shared__ __align__(16) Staging st;
    gemm_tiles_for(ops, m, n, k, k_begin, k_end, chunk, a, b, 1.0f, 0.0f, partials + offset,
                   st);
}

