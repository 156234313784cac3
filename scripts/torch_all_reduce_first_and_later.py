# Usage: mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 [--bind-to none] python3 scripts/torch_all_reduce_first_and_later.py
# 20 in-place all_reduces of 128 KiB (data_parallel's gradient), PyTorch + NCCL, one rank per GPU under mpirun.
import os, time, torch, torch.distributed as dist
rank = int(os.environ["OMPI_COMM_WORLD_RANK"]); size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
torch.cuda.set_device(int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]))
dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=size)
x = torch.ones(256 * 128, device="cuda")
t = time.perf_counter(); dist.all_reduce(x); torch.cuda.synchronize(); first = time.perf_counter() - t
t = time.perf_counter()
for _ in range(19):
    dist.all_reduce(x)
torch.cuda.synchronize(); per = (time.perf_counter() - t) / 19
if rank == 0:
    print(f"torch all_reduce 128 KiB: first {first*1e3:.1f} ms, then {per*1e6:.0f} us per call; affinity {sorted(os.sched_getaffinity(0))[:4]}...")
dist.destroy_process_group()
