// Element-wise kernels' shared code: each precision's kernels are a module of their own
// (elementwise_f32.cu, elementwise_f64.cu, elementwise_half.cu, each preceded by this
// header), so that a program compiles only the precisions it launches. Convention of
// this crate: every device slice parameter is passed as (pointer, length); a kernel
// touches only indices below the length it is given, so it stays in bounds whatever the
// other arguments say.
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
