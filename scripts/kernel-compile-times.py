#!/usr/bin/env python3
"""Times NVRTC's compile of each module of the `kernels` crate, as stream-core compiles them
(driver/nvrtc.rs's options, to CUBIN), on a GPU machine (it needs libnvrtc, no GPU work):

    CUDA_CACHE_DISABLE=1 python3 scripts/kernel-compile-times.py sm_90

With CUDA's compute cache on, a module's second compile is served from it: set
CUDA_CACHE_DISABLE=1 to time what a fresh machine pays at a program's first launch. The
modules are written as kernels/src/declarations.rs writes them; keep the two alike.
"""
import ctypes
import glob
import os
import sys
import time

CUDA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'kernels', 'cuda')


def read(name):
    with open(os.path.join(CUDA, name)) as f:
        return f.read()


def form(a, b):
    return f'#define A_TRANSPOSED {a}\n#define B_TRANSPOSED {b}\n'


def modules():
    tiles = read('sgemm_tiles.cuh')
    for precision in ('f32', 'f64', 'half'):
        half = read('half.cuh') if precision == 'half' else ''
        yield f'elementwise {precision}', half + read('elementwise.cuh') + read(f'elementwise_{precision}.cu')
        yield f'reduce {precision}', half + read('reduce.cuh') + read(f'reduce_{precision}.cu')
    yield 'transpose', read('transpose.cu')
    for name, (a, b) in {'NN': ('false', 'false'), 'TN': ('true', 'false'),
                         'NT': ('false', 'true'), 'TT': ('true', 'true')}.items():
        yield f'sgemm {name}', form(a, b) + tiles + read('sgemm.cu')
        yield f'sgemm split-k {name}', form(a, b) + tiles + read('sgemm_split_k.cu')
    yield 'sgemm split-k sum', read('sgemm_split_k_sum.cu')


def nvrtc():
    for path in sorted(glob.glob('/usr/local/cuda*/lib64/libnvrtc.so*')) + ['libnvrtc.so']:
        try:
            return ctypes.CDLL(path)
        except OSError:
            pass
    sys.exit('kernel-compile-times: no libnvrtc found')


def compile_ms(lib, source, arch):
    program = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b'module.cu', 0, None, None):
        sys.exit('kernel-compile-times: nvrtcCreateProgram failed')
    options = [f'--gpu-architecture={arch}'.encode(), b'--std=c++17', b'-default-device']
    start = time.perf_counter()
    status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
    elapsed = (time.perf_counter() - start) * 1e3
    size = ctypes.c_size_t()
    lib.nvrtcGetCUBINSize(program, ctypes.byref(size))
    lib.nvrtcDestroyProgram(ctypes.byref(program))
    if status:
        sys.exit(f'kernel-compile-times: NVRTC error {status}')
    return elapsed, size.value


def main():
    arch = sys.argv[1] if len(sys.argv) > 1 else 'sm_90'
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    lib = nvrtc()
    print(f'NVRTC compile per module for {arch}, CUDA_CACHE_DISABLE={os.environ.get("CUDA_CACHE_DISABLE")}')
    for name, source in modules():
        runs = [compile_ms(lib, source, arch) for _ in range(repeats)]
        times = ' '.join(f'{ms:7.1f}' for ms, _ in runs)
        print(f'{name:20s} cubin {runs[0][1]:7d} B   ms {times}')


if __name__ == '__main__':
    main()
