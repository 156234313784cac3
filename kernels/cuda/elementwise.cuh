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

// y[i] = value for every i < y_len, in 16-byte stores: the elements before y's first
// 16-byte boundary (the head) and after its last (the tail), fewer than 16 bytes each,
// are stored one by one by the grid's first threads (a block has 256), the rest as
// 16-byte vectors over the grid. An element's 2, 4 or 8 bytes divide 16, and `y` is
// aligned to its element, so the head is whole elements. On an H200, 64 Mi f32: 4455
// GB/s against 4311 with one element a store, cudaMemset's 4338; a view at an odd
// offset 4039 against 2831; 64 Mi f16 4235 against 3144 (benchmarks/results/
// 2026-11-28-h200x2-fill-vectors-and-suite.txt).
template <typename T>
__device__ void fill(T value, T* y, size_t y_len) {
    constexpr size_t PER_VECTOR = 16 / sizeof(T);
    static_assert(PER_VECTOR * sizeof(T) == 16, "an element's size divides 16");
    size_t thread = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t past_boundary = (reinterpret_cast<size_t>(y) % 16) / sizeof(T);
    size_t head = past_boundary == 0 ? 0 : PER_VECTOR - past_boundary;
    if (head > y_len) head = y_len;
    if (thread < head) y[thread] = value;
    T lanes[PER_VECTOR];
#pragma unroll
    for (size_t k = 0; k < PER_VECTOR; ++k) lanes[k] = value;
    uint4 pattern;
    memcpy(&pattern, lanes, sizeof(pattern));
    size_t vectors = (y_len - head) / PER_VECTOR;
    uint4* body = reinterpret_cast<uint4*>(y + head);
    for (size_t i = thread; i < vectors; i += stride) body[i] = pattern;
    size_t tail_at = head + vectors * PER_VECTOR;
    if (thread < y_len - tail_at) y[tail_at + thread] = value;
}

// y[i] = f(x[i], y[i]) for every i < n, over the grid: each thread takes four of its
// indices at a time (i, i + stride, ...) and loads all four before it stores any, so that
// it has four elements' loads in flight rather than one (an axpy of 64 Mi f32 on an H200:
// 4131 GB/s against 3555 one element at a time, PyTorch's add_ 4188). `y` is read only
// when READS_Y; x and y never overlap (a shared and a mutable borrow).
template <bool READS_Y, typename T, typename F>
__device__ void map_by_four(const T* x, T* y, size_t n, const F& f) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n && n - i > 3 * stride; i += 4 * stride) {
        T xs[4], ys[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            xs[k] = x[i + k * stride];
            ys[k] = READS_Y ? y[i + k * stride] : T();
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) y[i + k * stride] = f(xs[k], ys[k]);
    }
    for (; i < n; i += stride) y[i] = f(x[i], READS_Y ? y[i] : T());
}

template <typename T>
__device__ void scale(T a, const T* x, size_t x_len, T* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    map_by_four<false>(x, y, n, [=](T xv, T) { return a * xv; });
}

template <typename T>
__device__ void axpy(T a, const T* x, size_t x_len, T* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    map_by_four<true>(x, y, n, [=](T xv, T yv) { return a * xv + yv; });
}
