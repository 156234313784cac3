# One-rank in-place allReduce of one f32 + stream synchronise, per call, through CuPy, on
# CuPy's default pool memory (cudaMalloc) and on a cudaMallocAsync pool's. Run alone:
# python3 benchmarks/peers/cupy_one_rank_all_reduce.py (the barrier rows' CuPy side, measured apart).
import time, cupy
from cupy.cuda import nccl
uid = nccl.get_unique_id()
comm = nccl.NcclCommunicator(1, uid, 0)
stream = cupy.cuda.Stream(non_blocking=True)
def timed(x, label, n=2000):
    for _ in range(100):
        comm.allReduce(x.data.ptr, x.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr); stream.synchronize()
    best = []
    for r in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            comm.allReduce(x.data.ptr, x.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
            stream.synchronize()
        best.append((time.perf_counter_ns() - t) / n / 1e3)
    t = time.perf_counter_ns()
    for _ in range(n):
        stream.synchronize()
    idle = (time.perf_counter_ns() - t) / n / 1e3
    busy = 0
    for _ in range(n):
        comm.allReduce(x.data.ptr, x.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
        busy += not stream.done
        stream.synchronize()
    print(f"{label}: allReduce + synchronize {sorted(best)[2]:.2f} us (median of 5), idle synchronize "
          f"{idle:.2f} us; the stream had work right after the call in {busy} of {n}")
with stream:
    x = cupy.zeros(1, dtype=cupy.float32)
timed(x, "cudaMalloc memory (CuPy's default pool)")
cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
with stream:
    y = cupy.zeros(1, dtype=cupy.float32)
stream.synchronize()
timed(y, "cudaMallocAsync pool memory")
timed(x, "cudaMalloc memory again")
print("nccl", nccl.get_version())
