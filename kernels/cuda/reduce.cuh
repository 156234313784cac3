// Deterministic reductions: a fixed number of blocks (a function of n only) each sum a
// fixed, strided set of elements and reduce them in shared memory in a fixed tree order;
// a second launch of one block reduces the per-block partials the same way. No atomics,
// so the result depends only on the input and its length, never on timing.
//
// Slices are (pointer, length) pairs; kernels stay below the lengths they are given.
//
// This header is the reductions' shared code: each precision's kernels are a module of
// their own (reduce_f32.cu, reduce_f64.cu, reduce_half.cu, each preceded by this header),
// so that a program compiles only the precisions it launches.

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

// The sum of term(i) over this thread's indices i = blockIdx.x*T + t + k*gridDim.x*T below
// n, in an order fixed by n: four running sums, each index in turn to the next (so that a
// thread has four loads of each operand in flight, not one), the indices left after the
// last whole four to the first sum, then (s0 + s1) + (s2 + s3).
template <typename Acc, typename Term>
__device__ Acc strided_sum(const Term& term, size_t n) {
    size_t stride = (size_t)gridDim.x * REDUCE_THREADS;
    size_t i = blockIdx.x * (size_t)REDUCE_THREADS + threadIdx.x;
    Acc s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (; i < n && n - i > 3 * stride; i += 4 * stride) {
        s0 += term(i);
        s1 += term(i + stride);
        s2 += term(i + 2 * stride);
        s3 += term(i + 3 * stride);
    }
    for (; i < n; i += stride) s0 += term(i);
    return (s0 + s1) + (s2 + s3);
}

// Pass 1: partials[blockIdx.x] = the sum over this block's indices of acc(x[i]) (or
// acc(x[i]) * acc(y[i])), in Acc: `acc` reads an element as the accumulator's type (the
// identity for f32 and f64; f16 and bf16 to f32, reduce_half.cu).
template <typename Acc, bool DOT, typename T, typename ToAcc>
__device__ void partial_sums(const T* x, size_t x_len, const T* y, size_t y_len, Acc* partials,
                             size_t partials_len, const ToAcc& acc) {
    if (blockIdx.x >= partials_len) return;
    size_t n = DOT ? (x_len < y_len ? x_len : y_len) : x_len;
    Acc sum = strided_sum<Acc>(
        [&](size_t i) { return DOT ? acc(x[i]) * acc(y[i]) : acc(x[i]); }, n);
    Acc total = block_tree_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// `partial_sums` of elements that are their own accumulator type.
template <typename T, bool DOT>
__device__ void partial_sums(const T* x, size_t x_len, const T* y, size_t y_len, T* partials,
                             size_t partials_len) {
    partial_sums<T, DOT>(x, x_len, y, y_len, partials, partials_len, [](T v) { return v; });
}

// Pass 2 (one block): out[0] = sum of partials, in a fixed order.
template <typename T>
__device__ void final_sum(const T* partials, size_t partials_len, T* out, size_t out_len) {
    T acc = 0;
    for (size_t i = threadIdx.x; i < partials_len; i += REDUCE_THREADS) acc += partials[i];
    T total = block_tree_sum(acc);
    if (threadIdx.x == 0 && out_len > 0) out[0] = total;
}
