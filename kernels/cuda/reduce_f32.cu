// f32 reductions; reduce.cuh precedes this file in its module. `final_sum_f32` also
// finishes the f16 and bf16 partial sums (reduce_half.cu), which are f32.

extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_f32(const float* x, size_t x_len, float* p, size_t p_len) {
    partial_sums<float, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_f32(
    const float* x, size_t x_len, const float* y, size_t y_len, float* p, size_t p_len
) {
    partial_sums<float, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
final_sum_f32(const float* p, size_t p_len, float* out, size_t out_len) {
    final_sum(p, p_len, out, out_len);
}
