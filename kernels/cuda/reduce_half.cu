// f16 and bf16 reductions; half.cuh and reduce.cuh precede this file in its module. The
// partial sums accumulate in f32 and are f32; `final_sum_f32` (reduce_f32.cu) finishes
// them.

// reduce.cuh's partial sums, each element read as f32.
template <typename H, bool DOT>
__device__ void half_partial_sums(const unsigned short* x, size_t x_len, const unsigned short* y,
                                  size_t y_len, float* partials, size_t partials_len) {
    partial_sums<float, DOT>(x, x_len, y, y_len, partials, partials_len,
                             [](unsigned short v) { return H::to_f32(v); });
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
dot_partials_f16(
    const unsigned short* x, size_t x_len,
    const unsigned short* y, size_t y_len,
    float* p, size_t p_len
) {
    half_partial_sums<F16, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_bf16(
    const unsigned short* x, size_t x_len,
    const unsigned short* y, size_t y_len,
    float* p, size_t p_len
) {
    half_partial_sums<BF16, true>(x, x_len, y, y_len, p, p_len);
}
