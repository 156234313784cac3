// The last step of a split-k SGEMM (sgemm_split_k.cu), shared by every form of the
// operands, in a module of its own (it needs nothing of sgemm_tiles.cuh):
// c = alpha * (sum over z of partials[z * m * n..][..m * n], added in z order) + beta * c
// (c not read when beta == 0). Nothing is computed unless `partials` holds `splits`
// slices of m * n and `c` holds m * n.

#define SUM_THREADS 256

extern "C" __global__ void __launch_bounds__(SUM_THREADS)
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
