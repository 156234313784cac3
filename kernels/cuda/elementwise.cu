// Element-wise kernels. Convention of this crate: every device slice parameter is
// passed as (pointer, length); a kernel touches only indices below the length it is
// given, so it stays in bounds whatever the other arguments say.
//
// Each kernel is declared for blocks of exactly ELEMENTWISE_THREADS threads in x
// (`#[kernel(block = 256)]` in ../src/declarations.rs): the grid-stride loops index
// one dimension, so each element is written by one thread only for 1-D blocks.

#define ELEMENTWISE_THREADS 256

template <typename T>
__device__ void fill(T value, T* y, size_t y_len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < y_len;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = value;
    }
}

template <typename T>
__device__ void scale(T a, const T* x, size_t x_len, T* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = a * x[i];
    }
}

template <typename T>
__device__ void axpy(T a, const T* x, size_t x_len, T* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f32(float v, float* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f64(double v, double* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_u32(unsigned v, unsigned* y, size_t y_len) { fill(v, y, y_len); }

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    scale(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f64(double a, const double* x, size_t x_len, double* y, size_t y_len) {
    scale(a, x, x_len, y, y_len);
}

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    axpy(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f64(double a, const double* x, size_t x_len, double* y, size_t y_len) {
    axpy(a, x, x_len, y, y_len);
}

// f16 and bf16 (see half.cuh, which precedes this file): the 16 bits are copied by
// `fill`; `scale` and `axpy` compute in f32 (axpy as one fused multiply-add) and round
// once.
template <typename H>
__device__ void scale_half(unsigned short a, const unsigned short* x, size_t x_len,
                           unsigned short* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    float af = H::to_f32(a);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = H::from_f32(af * H::to_f32(x[i]));
    }
}

template <typename H>
__device__ void axpy_half(unsigned short a, const unsigned short* x, size_t x_len,
                          unsigned short* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    float af = H::to_f32(a);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = H::from_f32(fmaf(af, H::to_f32(x[i]), H::to_f32(y[i])));
    }
}

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_f16(unsigned short v, unsigned short* y, size_t y_len) { fill(v, y, y_len); }
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
fill_bf16(unsigned short v, unsigned short* y, size_t y_len) { fill(v, y, y_len); }

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_f16(unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len) {
    scale_half<F16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
scale_bf16(unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len) {
    scale_half<BF16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_f16(unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len) {
    axpy_half<F16>(a, x, x_len, y, y_len);
}
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS)
axpy_bf16(unsigned short a, const unsigned short* x, size_t x_len, unsigned short* y, size_t y_len) {
    axpy_half<BF16>(a, x, x_len, y, y_len);
}
