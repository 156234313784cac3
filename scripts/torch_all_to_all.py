# Usage: torchrun --nproc-per-node=2 scripts/torch_all_to_all.py
# PyTorch's all_to_all_single (equal splits, f32) over NCCL, one process per GPU: busbw as
# nccl-tests' alltoall defines it (bytes of a rank's buffer / time x (n-1)/n), the median
# of 11 samples of `iters` calls until the stream is done, after 2 warm-up samples: the
# peer of the bench's "all_to_all f32, ... per rank, 2 GPU(s)" rows (which drive both GPUs
# from one process).
import os, statistics, time, torch, torch.distributed as dist
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
MIB = 1 << 20
for nbytes in [32 << 10, MIB, 8 * MIB, 64 * MIB, 256 * MIB]:
    x = torch.ones(nbytes // 4, device="cuda")
    y = torch.empty_like(x)
    iters = 5 if nbytes >= 64 * MIB else 20
    samples = []
    for i in range(13):
        dist.barrier(); torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_to_all_single(y, x)
        torch.cuda.synchronize()
        if i >= 2:
            samples.append((time.perf_counter() - t) / iters)
    t = statistics.median(samples)
    busbw = nbytes / t / 1e9 * (size - 1) / size
    if rank == 0:
        name = f"{nbytes // MIB} MiB" if nbytes >= MIB else f"{nbytes >> 10} KiB"
        print(f"torch all_to_all_single f32, {name} per rank, {size} GPU(s): {busbw:.2f} GB/s busbw ({t*1e6:.1f} us per call)")
dist.destroy_process_group()
