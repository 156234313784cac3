// f16 and bf16 reductions; half.cuh and reduce.cuh precede this file in its module. The
// partial sums accumulate in f32 and are f32; `final_sum_f32` (reduce_f32.cu) finishes
// them.

template <typename H, bool DOT>
__device__ void half_partial_sums(const unsigned short* x, size_t x_len, const unsigned short* y,
                                  size_t y_len, float* partials, size_t partials_len) {
    if (blockIdx.x >= partials_len) return;
    size_t n = DOT ? (x_len < y_len ? x_len : y_len) : x_len;
    float acc = strided_sum<float>(
        [&](size_t i) { return DOT ? H::to_f32(x[i]) * H::to_f32(y[i]) : H::to_f32(x[i]); }, n);
    float total = block_tree_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_f16(const unsigned short* x, size_t x_len, float* p, size_t p_len) {
    half_partial_sums<F16, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_bf16(const unsigned short* x, size_t x_len, float* p, size_t p_len) {
    half_partial_sums<BF16, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_f16(const unsigned short* x, size_t x_len, const unsigned short* y, size_t y_len, float* p, size_t p_len) {
    half_partial_sums<F16, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_bf16(const unsigned short* x, size_t x_len, const unsigned short* y, size_t y_len, float* p, size_t p_len) {
    half_partial_sums<BF16, true>(x, x_len, y, y_len, p, p_len);
}
