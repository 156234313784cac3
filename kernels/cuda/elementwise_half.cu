// f16 and bf16 element-wise kernels; half.cuh and elementwise.cuh precede this file in
// its module. The 16 bits are copied by `fill`; `scale` and `axpy` compute in f32 (axpy
// as one fused multiply-add) and round once.

template <typename H>
__device__ void scale_half(unsigned short a, const unsigned short* x, size_t x_len,
                           unsigned short* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    float af = H::to_f32(a);
    map_by_four<false>(x, y, n, [=](unsigned short xv, unsigned short) {
        return H::from_f32(af * H::to_f32(xv));
    });
}

template <typename H>
__device__ void axpy_half(unsigned short a, const unsigned short* x, size_t x_len,
                          unsigned short* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    float af = H::to_f32(a);
    map_by_four<true>(x, y, n, [=](unsigned short xv, unsigned short yv) {
        return H::from_f32(fmaf(af, H::to_f32(xv), H::to_f32(yv)));
    });
}

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f16(unsigned short v, unsigned short* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_bf16(unsigned short v, unsigned short* y, size_t y_len) { fill(v, y, y_len); }

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f16(
    unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len
) {
    scale_half<F16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_bf16(
    unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len
) {
    scale_half<BF16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f16(
    unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len
) {
    axpy_half<F16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_bf16(
    unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len
) {
    axpy_half<BF16>(a, x, x_len, y, y_len);
}
