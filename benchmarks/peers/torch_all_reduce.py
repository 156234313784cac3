"""torch.distributed.all_reduce bus bandwidth, timed as `bench --case nccl` times ours.

Run one process per GPU:  torchrun --nproc-per-node=N benchmarks/peers/torch_all_reduce.py
A sample is the host time of `iters` out-of-place-sized f32 sum all-reduces enqueued
and the stream synchronised, per all-reduce; each size prints the median of its samples
as algbw and busbw (nccl-tests' definition, busbw = algbw * 2(n-1)/n), in GB/s.
"""
import os
import statistics
import time

import torch
import torch.distributed as dist

MIB = 1 << 20
SIZES = [8, 64, 512, 4096, 32 << 10, 256 << 10, MIB, 8 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB]


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    unit = "busbw" if n > 1 else "algbw"
    for size in SIZES:
        x = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        iters = 5 if size >= 64 * MIB else 20 if size >= MIB else 100
        samples = 5 if size >= 256 * MIB else 11
        times = []
        for i in range(samples + 2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            if i >= 2:
                times.append((time.perf_counter() - start) / iters)
        t = statistics.median(times)
        if dist.get_rank() == 0:
            print(f"torch all_reduce f32 sum, {size} B, {n} GPU(s): {size / t / 1e9 * factor:.2f} GB/s {unit} ({t * 1e6:.1f} us)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
