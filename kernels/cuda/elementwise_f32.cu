// f32 and u32 element-wise kernels; elementwise.cuh precedes this file in its module.

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f32(float v, float* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_u32(unsigned v, unsigned* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    scale(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    axpy(a, x, x_len, y, y_len);
}
