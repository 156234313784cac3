// The tiled SGEMM in one pass, for one form of the operands: sgemm_tiles.cuh precedes this
// file in its module, and before it two #defines, A_TRANSPOSED and B_TRANSPOSED (`true`
// when that operand is stored transposed, BLAS's op), which ../src/declarations.rs writes
// once per form. Nothing is computed unless the slices hold m*k, k*n and m*n elements.

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_tiled(unsigned m32, unsigned n32, unsigned k32, float alpha, const float* a,
            size_t a_len, const float* b, size_t b_len, float beta, float* c, size_t c_len) {
    const size_t m = m32, n = n32, k = k32;
    if (m * k > a_len || k * n > b_len || m * n > c_len) return;
    __shared__ __align__(16) Staging st;
    gemm_tiles<A_TRANSPOSED, B_TRANSPOSED>(m, n, k, 0, k, 0, a, b, alpha, beta, c, st);
}
