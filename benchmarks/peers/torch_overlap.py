"""torch.distributed's data-parallel step with the gradient's all-reduce overlapped, timed
as `bench --case nccl`'s overlap rows (benchmarks/src/nccl/overlap.rs) time ours.

Run one process per GPU:
    torchrun --nproc-per-node=2 benchmarks/peers/torch_overlap.py [KERNEL_ITERS]
    TORCH_NCCL_HIGH_PRIORITY=1 torchrun --nproc-per-node=2 benchmarks/peers/torch_overlap.py [KERNEL_ITERS]

A step: the bench's `work_f32` kernel (the same CUDA source, launched through CuPy on
PyTorch's current stream) writes the gradient, 64 MiB of f32; `dist.all_reduce` sums
it, serially or with `async_op=True` (PyTorch runs it on its own NCCL stream, of the
default priority unless TORCH_NCCL_HIGH_PRIORITY=1) while the next kernel runs, then
`wait()`. KERNEL_ITERS (default 398, what the bench calibrated on 2x H200) sets the
kernel's length; pass the bench's printed value to compare on another machine. A sample
is the host time of 20 steps and a synchronisation, per step; the median of 11 samples
after 2 warm-ups is printed, for the serial and the overlapped step.
"""
import os
import statistics
import sys
import time

import cupy
import torch
import torch.distributed as dist


def bench_kernels():
    """The bench's kernel source, `SOURCE` in benchmarks/src/cuda.rs, read from that file
    so that this script and the bench compile the same `work_f32`."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "cuda.rs")
    with open(path) as f:
        text = f.read()
    opening = 'pub const SOURCE: &str = r#"'
    start = text.index(opening) + len(opening)
    return text[start:text.index('"#;', start)]


MIB = 1 << 20
COUNT = 64 * MIB // 4
STEPS = 20


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 398
    kernel = cupy.RawKernel(bench_kernels(), "work_f32")
    x = torch.full((COUNT,), 0.5, device="cuda")
    grad = torch.zeros_like(x)
    nxt = torch.zeros_like(x)
    blocks = min((COUNT + 255) // 256, 1 << 16)  # the bench's work_config

    def work(out):
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        args = (cupy.uint32(iters), cupy.from_dlpack(x), cupy.uint64(COUNT),
                cupy.from_dlpack(out), cupy.uint64(COUNT))
        kernel((blocks,), (256,), args, stream=stream)

    def serial():
        work(grad)
        dist.all_reduce(grad)
        work(nxt)

    def overlapped():
        work(grad)
        handle = dist.all_reduce(grad, async_op=True)
        work(nxt)
        handle.wait()

    priority = os.environ.get("TORCH_NCCL_HIGH_PRIORITY", "0")
    for name, step in [("serial", serial), ("overlapped", overlapped)]:
        times = []
        for sample in range(13):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
            if sample >= 2:
                times.append((time.perf_counter() - start) / STEPS)
        t = statistics.median(times)
        if dist.get_rank() == 0:
            print(f"torch data-parallel step, 64 MiB gradient all_reduce, {name}, "
                  f"kernel of {iters} iterations, TORCH_NCCL_HIGH_PRIORITY={priority}, "
                  f"{dist.get_world_size()} GPU(s): {t * 1e6:.1f} us/step "
                  f"(min {min(times) * 1e6:.1f} max {max(times) * 1e6:.1f})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
