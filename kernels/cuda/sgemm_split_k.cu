// The tiled SGEMM's split-k part, for one form of the operands (as sgemm.cu: sgemm_tiles.cuh
// and the two #defines A_TRANSPOSED and B_TRANSPOSED precede this file in its module).
// Block z multiplies its range of k into slice z of `partials`; sgemm_split_k_sum.cu's
// kernel then adds the slices. Nothing is computed unless the slices hold m*k and k*n
// elements and `partials` gridDim.z slices of m*n.

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_split_k(unsigned m32, unsigned n32, unsigned k32, unsigned chunk32, const float* a,
              size_t a_len, const float* b, size_t b_len, float* partials,
              size_t partials_len) {
    const size_t m = m32, n = n32, k = k32, chunk = chunk32;
    size_t k_begin, k_end, offset;
    if (!split_range(m, n, k, chunk, a_len, b_len, partials_len, &k_begin, &k_end, &offset))
        return;
    __shared__ __align__(16) Staging st;
    gemm_tiles<A_TRANSPOSED, B_TRANSPOSED>(m, n, k, k_begin, k_end, chunk, a, b, 1.0f, 0.0f,
                                           partials + offset, st);
}
