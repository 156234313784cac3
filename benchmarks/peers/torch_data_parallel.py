"""The `data_parallel` example's training step (examples/data_parallel.rs) in PyTorch, as DDP
runs it, timed as the example times its own.

Run one process per GPU:
    torchrun --nproc-per-node=2 benchmarks/peers/torch_data_parallel.py
    TORCH_NCCL_HIGH_PRIORITY=1 torchrun --nproc-per-node=2 benchmarks/peers/torch_data_parallel.py

A step on a rank's 1024 rows of a two-layer linear model (256 -> 256 -> 128, f32, cuBLAS
without TF32, as the example): forward `h = x w1`, `y = h w2 - target`; the second
layer's gradient `h^T y / batch`, its all-reduce with `async_op=True` (on PyTorch's NCCL
stream, urgent with TORCH_NCCL_HIGH_PRIORITY=1; the example's is on a fork of the most
urgent priority) while the first layer's gradient `x^T (y w2^T) / batch` is computed,
`wait()`, the first layer's all-reduce, and both updates. As in the example, a sample is
19 steps issued without a host wait, then a synchronisation, per step; the median of 11
samples after 2 warm-ups is printed, with rank 0's figures.
"""
import os
import statistics
import time

import torch
import torch.distributed as dist

FEATURES, HIDDEN, OUTPUTS, ROWS = 256, 256, 128, 1024
STEPS = 19
LEARNING_RATE = 0.5


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    batch = ROWS * dist.get_world_size()
    gen = torch.Generator(device="cuda").manual_seed(1 + dist.get_rank())
    x = torch.rand((ROWS, FEATURES), device="cuda", generator=gen) * 2 - 1
    target = torch.rand((ROWS, OUTPUTS), device="cuda", generator=gen) * 2 - 1
    w1 = (torch.rand((FEATURES, HIDDEN), device="cuda") * 2 - 1) / FEATURES ** 0.5
    w2 = (torch.rand((HIDDEN, OUTPUTS), device="cuda") * 2 - 1) / HIDDEN ** 0.5
    dist.broadcast(w1, 0)
    dist.broadcast(w2, 0)

    def step():
        h = x @ w1
        y = h @ w2
        y -= target
        grad2 = (h.t() @ y) / batch
        handle = dist.all_reduce(grad2, async_op=True)
        grad1 = (x.t() @ (y @ w2.t())) / batch
        handle.wait()
        dist.all_reduce(grad1)
        w1.sub_(LEARNING_RATE * grad1)
        w2.sub_(LEARNING_RATE * grad2)

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
        priority = os.environ.get("TORCH_NCCL_HIGH_PRIORITY", "0")
        print(f"torch data_parallel step (two layers, {ROWS} rows per rank), "
              f"TORCH_NCCL_HIGH_PRIORITY={priority}, {dist.get_world_size()} GPU(s): "
              f"{t * 1e6:.1f} us/step (min {min(times) * 1e6:.1f} max {max(times) * 1e6:.1f})",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
