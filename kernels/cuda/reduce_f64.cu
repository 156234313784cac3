// f64 reductions; reduce.cuh precedes this file in its module.

extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_f64(const double* x, size_t x_len, double* p, size_t p_len) {
    partial_sums<double, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_f64(
    const double* x, size_t x_len, const double* y, size_t y_len, double* p, size_t p_len
) {
    partial_sums<double, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
final_sum_f64(const double* p, size_t p_len, double* out, size_t out_len) {
    final_sum(p, p_len, out, out_len);
}
