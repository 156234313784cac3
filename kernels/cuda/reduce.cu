// Deterministic reductions: a fixed number of blocks (a function of n only) each sum a
// fixed, strided set of elements and reduce them in shared memory in a fixed tree order;
// a second launch of one block reduces the per-block partials the same way. No atomics,
// so the result depends only on the input and its length, never on timing.
//
// Slices are (pointer, length) pairs; kernels stay below the lengths they are given.

// Every kernel here is declared for blocks of exactly REDUCE_THREADS threads
// (`#[kernel(block = 256)]` in ../src/declarations.rs): block_tree_sum indexes its
// __shared__ array of REDUCE_THREADS elements with threadIdx.x.
#define REDUCE_THREADS 256

template <typename T>
__device__ T block_tree_sum(T v) {
    __shared__ T partial[REDUCE_THREADS];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (unsigned stride = REDUCE_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    return partial[0];
}

// Pass 1: partials[blockIdx.x] = sum of x[i] (or x[i]*y[i]) over i = blockIdx.x*T + t + k*gridDim.x*T.
template <typename T, bool DOT>
__device__ void partial_sums(const T* x, size_t x_len, const T* y, size_t y_len, T* partials, size_t partials_len) {
    if (blockIdx.x >= partials_len) return;
    size_t n = DOT ? (x_len < y_len ? x_len : y_len) : x_len;
    T acc = 0;
    for (size_t i = blockIdx.x * (size_t)REDUCE_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * REDUCE_THREADS) {
        acc += DOT ? x[i] * y[i] : x[i];
    }
    T total = block_tree_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2 (one block): out[0] = sum of partials, in a fixed order.
template <typename T>
__device__ void final_sum(const T* partials, size_t partials_len, T* out, size_t out_len) {
    T acc = 0;
    for (size_t i = threadIdx.x; i < partials_len; i += REDUCE_THREADS) acc += partials[i];
    T total = block_tree_sum(acc);
    if (threadIdx.x == 0 && out_len > 0) out[0] = total;
}

extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_f32(const float* x, size_t x_len, float* p, size_t p_len) {
    partial_sums<float, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
sum_partials_f64(const double* x, size_t x_len, double* p, size_t p_len) {
    partial_sums<double, false>(x, x_len, x, x_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_f32(const float* x, size_t x_len, const float* y, size_t y_len, float* p, size_t p_len) {
    partial_sums<float, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
dot_partials_f64(const double* x, size_t x_len, const double* y, size_t y_len, double* p, size_t p_len) {
    partial_sums<double, true>(x, x_len, y, y_len, p, p_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
final_sum_f32(const float* p, size_t p_len, float* out, size_t out_len) {
    final_sum(p, p_len, out, out_len);
}
extern "C" __global__ void __launch_bounds__(REDUCE_THREADS)
final_sum_f64(const double* p, size_t p_len, double* out, size_t out_len) {
    final_sum(p, p_len, out, out_len);
}

// f16 and bf16 (see half.cuh, which precedes this file): the partial sums accumulate in
// f32 and are f32; `final_sum_f32` finishes them.
template <typename H, bool DOT>
__device__ void half_partial_sums(const unsigned short* x, size_t x_len, const unsigned short* y,
                                  size_t y_len, float* partials, size_t partials_len) {
    if (blockIdx.x >= partials_len) return;
    size_t n = DOT ? (x_len < y_len ? x_len : y_len) : x_len;
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)REDUCE_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * REDUCE_THREADS) {
        acc += DOT ? H::to_f32(x[i]) * H::to_f32(y[i]) : H::to_f32(x[i]);
    }
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
