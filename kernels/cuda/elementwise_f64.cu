// f64 element-wise kernels; elementwise.cuh precedes this file in its module.

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f64(double v, double* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f64(double a, const double* x, size_t x_len, double* y, size_t y_len) {
    scale(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f64(double a, const double* x, size_t x_len, double* y, size_t y_len) {
    axpy(a, x, x_len, y, y_len);
}
