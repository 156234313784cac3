// f16 and bf16 travel as their 16 bits (`unsigned short`): kernels convert them to f32,
// compute in f32 and round once, to nearest with ties to even, the way the `half`
// crate's `from_f32` rounds on the host. No CUDA header (cuda_fp16.h, cuda_bf16.h) is
// needed, so NVRTC compiles these anywhere.

struct F16 {
    static __device__ float to_f32(unsigned short h) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
    static __device__ unsigned short from_f32(float f) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
};

struct BF16 {
    static __device__ float to_f32(unsigned short b) {
        return __uint_as_float(((unsigned)b) << 16);
    }
    static __device__ unsigned short from_f32(float f) {
        unsigned u = __float_as_uint(f);
        // NaN: quiet
        if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
        return (unsigned short)(u >> 16);
    }
};

