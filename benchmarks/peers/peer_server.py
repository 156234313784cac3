"""The peer side of `bench --case peers`: the same measurements as the library's, made
through PyTorch or CuPy, one sample per request, so that `bench` interleaves them with
its own samples round by round.

    python3 peer_server.py torch|cupy DEVICE_ORDINAL BATCH=256 OPS=64 ...

The loop sizes (`LOOP_SIZES` below) come from `bench` as NAME=value arguments, so that
both sides time the same loops from one definition (benchmarks/src/peers/ours.rs).

Protocol (one line each way, UTF-8):
  first line out:  "ready <framework> <version>"  or  "absent <why>" (then it exits)
  in:  "sample <key>"   out: "ok <figure>"  or  "absent <why>" (this key cannot be
                                              measured here)  or  "error <message>"
  in:  "quit"           (or end of input): exits

Every figure is in the unit `bench` prints for the key (benchmarks/src/peers/mod.rs
holds the list): ns per operation for host costs, GB/s for copies, GFLOP/s for SGEMM,
us per call for all_reduce and per barrier; the kernel keys (axpy, dot, transpose) are in
peer_kernels.py.
Host times are `time.perf_counter_ns` around the same loop the Rust side times;
copies and SGEMM include the synchronisation that makes their result usable, as ours
do (the scope's end).
"""
import sys
import time

import peer_kernels

MIB = 1 << 20
# Set from the command line (see main): launches per launch sample, operations per
# sample of the host-cost keys, kernels in the replayed graph, the SGEMM's side, SGEMMs
# and all_reduces per sample, graph replays per sample, all_gathers in the graph of
# all_gathers and the elements of each, kernels in the graph of the replay loop and its
# replays, the elements and matrix side of the kernel keys and their calls per sample.
LOOP_SIZES = (
    "BATCH", "OPS", "GRAPH_KERNELS", "GEMM_N", "GEMM_CALLS", "ALL_REDUCE_CALLS", "GRAPH_REPLAYS",
    "GRAPH_ALL_GATHERS", "GRAPH_ALL_GATHER_ELEMENTS", "LOOP_GRAPH_KERNELS", "LOOP_REPLAYS",
    "KERNEL_N", "KERNEL_SIDE", "KERNEL_CALLS",
)


def copy_size(key):
    """Bytes of a copy key: `..._64` is 64 MiB, `..._1024` 1 GiB."""
    return int(key.rsplit("_", 1)[1]) * MIB


class Peer:
    """What both frameworks share: the timing loops. A framework gives `stream`,
    `other`, `idle` (never given work) and the operations they time."""

    def sync(self):
        self.stream.synchronize()

    def per_op(self, ops, operation):
        """ns per call of `operation` over `ops` calls, synchronised after, untimed."""
        t = time.perf_counter_ns()
        for _ in range(ops):
            operation()
        ns = (time.perf_counter_ns() - t) / ops
        self.sync()
        return ns

    def replays(self, replay_once):
        """ns per kernel of GRAPH_REPLAYS calls of `replay_once`, each followed by an
        untimed synchronisation (as ours waits for each replay's `Pending`)."""
        ns = 0
        for _ in range(GRAPH_REPLAYS):
            t = time.perf_counter_ns()
            replay_once()
            ns += time.perf_counter_ns() - t
            self.sync()
        return ns / (GRAPH_REPLAYS * GRAPH_KERNELS)

    def replay_loop(self, replay_once):
        """us per replay of LOOP_REPLAYS calls of `replay_once` back to back and one
        synchronisation, all timed (as ours chains `replay_again` and waits once)."""
        t = time.perf_counter_ns()
        for _ in range(LOOP_REPLAYS):
            replay_once()
        self.sync()
        return (time.perf_counter_ns() - t) / 1e3 / LOOP_REPLAYS

    def sync_idle(self):
        """`synchronize()` of `idle`, a stream that never ran anything (as ours)."""
        t = time.perf_counter_ns()
        for _ in range(OPS):
            self.idle.synchronize()
        return (time.perf_counter_ns() - t) / OPS


class Torch(Peer):
    def __init__(self, ordinal):
        import torch

        self.torch = torch
        self.version = torch.__version__
        torch.cuda.set_device(ordinal)
        self.dev = torch.device("cuda", ordinal)
        torch.backends.cuda.matmul.allow_tf32 = False  # an SGEMM, as cuBLAS's default
        self.stream = torch.cuda.Stream(self.dev)
        self.other = torch.cuda.Stream(self.dev)
        self.idle = torch.cuda.Stream(self.dev)
        self.state = {}

    def on_stream(self):
        return self.torch.cuda.stream(self.stream)

    def launch(self):
        x = self.state.setdefault("one", self.torch.zeros(1, device=self.dev))
        with self.torch.cuda.stream(self.stream):
            return self.per_op(BATCH, lambda: x.fill_(1.0))

    def fork_join(self):
        a, b = self.stream, self.other

        def there_and_back():
            b.wait_stream(a)
            a.wait_stream(b)

        return self.per_op(OPS, there_and_back)

    def alloc_free(self):
        torch = self.torch
        with torch.cuda.stream(self.stream):
            return self.per_op(OPS, lambda: torch.empty(MIB, dtype=torch.uint8, device=self.dev))

    def buffers(self, key):
        torch = self.torch
        n = copy_size(key) // 4
        pinned = key.startswith("pinned")
        name = ("pinned" if pinned else "pageable", n)
        if name not in self.state:
            host = torch.ones(n, dtype=torch.float32, pin_memory=pinned)
            self.state[name] = (host, torch.empty(n, dtype=torch.float32, device=self.dev))
        return self.state[name]

    def copy(self, key):
        host, dev = self.buffers(key)
        with self.torch.cuda.stream(self.stream):
            t = time.perf_counter_ns()
            if "upload" in key:
                dev.copy_(host, non_blocking=True)
            else:
                host.copy_(dev, non_blocking=True)
            self.sync()
            return host.numel() * 4 / (time.perf_counter_ns() - t)  # bytes/ns = GB/s

    def graph_replay(self):
        torch = self.torch
        if "graph" not in self.state:
            x = torch.zeros(1, device=self.dev)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(GRAPH_KERNELS):
                    x.fill_(1.0)
            self.state["graph"] = (graph, x)
        graph, _ = self.state["graph"]
        with torch.cuda.stream(self.stream):
            return self.replays(graph.replay)

    def graph_loop(self):
        torch = self.torch
        if "loop_graph" not in self.state:
            x = torch.zeros(1, device=self.dev)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(LOOP_GRAPH_KERNELS):
                    x.fill_(1.0)
            self.state["loop_graph"] = (graph, x)
        graph, _ = self.state["loop_graph"]
        with torch.cuda.stream(self.stream):
            return self.replay_loop(graph.replay)

    def sgemm(self):
        torch = self.torch
        if "gemm" not in self.state:
            a = torch.rand(GEMM_N, GEMM_N, device=self.dev)
            b = torch.rand(GEMM_N, GEMM_N, device=self.dev)
            self.state["gemm"] = (a, b, torch.empty(GEMM_N, GEMM_N, device=self.dev))
        a, b, c = self.state["gemm"]
        with torch.cuda.stream(self.stream):
            self.sync()
            t = time.perf_counter_ns()
            for _ in range(GEMM_CALLS):
                torch.mm(a, b, out=c)
            self.sync()
            ns = time.perf_counter_ns() - t
        return 2 * GEMM_N**3 * GEMM_CALLS / ns  # flop/ns = GFLOP/s

    def process_group(self):
        """A process group of one rank (made once): `torch.distributed`'s NCCL backend."""
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(
                "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=self.dev
            )
        return dist

    def all_reduce(self, key):
        torch = self.torch
        dist = self.process_group()
        if "comm" not in self.state:
            n = copy_size(key) // 4
            self.state["comm"] = torch.ones(n, dtype=torch.float32, device=self.dev)
        x = self.state["comm"]
        torch.cuda.synchronize(self.dev)
        t = time.perf_counter_ns()
        for _ in range(ALL_REDUCE_CALLS):
            dist.all_reduce(x)  # on the process group's stream
        torch.cuda.synchronize(self.dev)
        return (time.perf_counter_ns() - t) / 1e3 / ALL_REDUCE_CALLS

    def barrier(self):
        """OPS barriers of the process group of one rank: us per barrier."""
        dist = self.process_group()
        dist.barrier(device_ids=[self.dev.index])  # NCCL's first call, untimed
        t = time.perf_counter_ns()
        for _ in range(OPS):
            dist.barrier(device_ids=[self.dev.index])
        return (time.perf_counter_ns() - t) / 1e3 / OPS

    def graph_all_gathers(self):
        """GRAPH_REPLAYS replays of a CUDA graph of GRAPH_ALL_GATHERS out-of-place
        all_gathers (one rank: a copy each), each waited for: us of the replay calls,
        per replay."""
        torch = self.torch
        dist = self.process_group()
        if "ag_graph" not in self.state:
            x = torch.ones(GRAPH_ALL_GATHER_ELEMENTS, dtype=torch.float32, device=self.dev)
            y = torch.empty_like(x)
            with torch.cuda.stream(self.stream):
                dist.all_gather_into_tensor(y, x)  # NCCL's first call, outside the capture
            self.sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(GRAPH_ALL_GATHERS):
                    dist.all_gather_into_tensor(y, x)
            self.state["ag_graph"] = (graph, x, y)
        graph = self.state["ag_graph"][0]
        with torch.cuda.stream(self.stream):
            return self.replays(graph.replay) * GRAPH_KERNELS / 1e3

    def close(self):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class CuPy(Peer):
    def __init__(self, ordinal):
        import cupy
        import numpy

        self.cupy, self.numpy = cupy, numpy
        self.version = cupy.__version__
        cupy.cuda.Device(ordinal).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.other = cupy.cuda.Stream(non_blocking=True)
        self.idle = cupy.cuda.Stream(non_blocking=True)
        self.events = (
            cupy.cuda.Event(disable_timing=True),
            cupy.cuda.Event(disable_timing=True),
        )
        self.state = {}

    def on_stream(self):
        return self.stream

    def launch(self):
        with self.stream:
            x = self.state.setdefault("one", self.cupy.zeros(1, dtype=self.cupy.float32))
            return self.per_op(BATCH, lambda: x.fill(1.0))

    def fork_join(self):
        (a, b), (there, back) = (self.stream, self.other), self.events

        def there_and_back():
            there.record(a)
            b.wait_event(there)
            back.record(b)
            a.wait_event(back)

        return self.per_op(OPS, there_and_back)

    def alloc_free(self):
        cupy = self.cupy
        with self.stream:
            return self.per_op(OPS, lambda: cupy.empty(MIB, dtype=cupy.uint8))

    def buffers(self, key):
        cupy, numpy = self.cupy, self.numpy
        n = copy_size(key) // 4
        pinned = key.startswith("pinned")
        name = ("pinned" if pinned else "pageable", n)
        if name not in self.state:
            if pinned:
                memory = cupy.cuda.alloc_pinned_memory(n * 4)
                host = numpy.frombuffer(memory, dtype=numpy.float32, count=n)
            else:
                memory, host = None, numpy.empty(n, dtype=numpy.float32)
            host[:] = 1.0
            with self.stream:
                dev = cupy.empty(n, dtype=cupy.float32)
            self.state[name] = (memory, host, dev)
        return self.state[name][1:]

    def copy(self, key):
        host, dev = self.buffers(key)
        t = time.perf_counter_ns()
        if "upload" in key:
            dev.set(host, stream=self.stream)
        else:
            dev.get(stream=self.stream, out=host)
        self.sync()
        return host.nbytes / (time.perf_counter_ns() - t)

    def graph_replay(self):
        cupy = self.cupy
        if "graph" not in self.state:
            with self.stream:
                x = cupy.zeros(1, dtype=cupy.float32)
                x.fill(1.0)  # compiled before the capture
                self.sync()
                self.stream.begin_capture()
                for _ in range(GRAPH_KERNELS):
                    x.fill(1.0)
                graph = self.stream.end_capture()
            self.state["graph"] = (graph, x)
        graph, _ = self.state["graph"]
        return self.replays(lambda: graph.launch(stream=self.stream))

    def graph_loop(self):
        cupy = self.cupy
        if "loop_graph" not in self.state:
            with self.stream:
                x = cupy.zeros(1, dtype=cupy.float32)
                x.fill(1.0)  # compiled before the capture
                self.sync()
                self.stream.begin_capture()
                for _ in range(LOOP_GRAPH_KERNELS):
                    x.fill(1.0)
                graph = self.stream.end_capture()
            self.state["loop_graph"] = (graph, x)
        graph, _ = self.state["loop_graph"]
        return self.replay_loop(lambda: graph.launch(stream=self.stream))

    def sgemm(self):
        cupy = self.cupy
        with self.stream:
            if "gemm" not in self.state:
                a = cupy.random.rand(GEMM_N, GEMM_N, dtype=cupy.float32)
                b = cupy.random.rand(GEMM_N, GEMM_N, dtype=cupy.float32)
                self.state["gemm"] = (a, b, cupy.empty((GEMM_N, GEMM_N), dtype=cupy.float32))
            a, b, c = self.state["gemm"]
            self.sync()
            t = time.perf_counter_ns()
            for _ in range(GEMM_CALLS):
                cupy.matmul(a, b, out=c)
            self.sync()
            return 2 * GEMM_N**3 * GEMM_CALLS / (time.perf_counter_ns() - t)

    def communicator(self):
        """`cupy.cuda.nccl` and a communicator of one rank (made once)."""
        if "nccl" not in self.state:
            try:
                from cupy.cuda import nccl
            except ImportError as e:
                raise Absent(f"cupy.cuda.nccl is not importable ({e})")
            if not getattr(nccl, "available", True):
                raise Absent("this CuPy was built without NCCL")
            self.state["nccl"] = (nccl, nccl.NcclCommunicator(1, nccl.get_unique_id(), 0))
        return self.state["nccl"]

    def all_reduce(self, key):
        cupy = self.cupy
        nccl, comm = self.communicator()
        if "comm" not in self.state:
            with self.stream:
                x = cupy.ones(copy_size(key) // 4, dtype=cupy.float32)
            self.state["comm"] = x
        x = self.state["comm"]
        self.sync()
        t = time.perf_counter_ns()
        for _ in range(ALL_REDUCE_CALLS):
            comm.allReduce(
                x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, self.stream.ptr
            )
        self.sync()
        return (time.perf_counter_ns() - t) / 1e3 / ALL_REDUCE_CALLS

    def barrier(self):
        """What a CuPy program does for a barrier (CuPy has none): OPS one-element
        allReduces, each with the stream synchronised: us per barrier."""
        cupy = self.cupy
        nccl, comm = self.communicator()
        if "token" not in self.state:
            with self.stream:
                self.state["token"] = cupy.zeros(1, dtype=cupy.float32)
        x = self.state["token"]
        self.sync()
        t = time.perf_counter_ns()
        for _ in range(OPS):
            comm.allReduce(
                x.data.ptr, x.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, self.stream.ptr
            )
            self.sync()
        return (time.perf_counter_ns() - t) / 1e3 / OPS

    def graph_all_gathers(self):
        """As `Torch.graph_all_gathers`, with `allGather` captured on the stream."""
        cupy = self.cupy
        nccl, comm = self.communicator()
        if "ag_graph" not in self.state:
            with self.stream:
                x = cupy.ones(GRAPH_ALL_GATHER_ELEMENTS, dtype=cupy.float32)
                y = cupy.empty_like(x)
            gather = lambda: comm.allGather(
                x.data.ptr, y.data.ptr, x.size, nccl.NCCL_FLOAT32, self.stream.ptr
            )
            gather()  # NCCL's first call, outside the capture
            self.sync()
            self.stream.begin_capture()
            for _ in range(GRAPH_ALL_GATHERS):
                gather()
            self.state["ag_graph"] = (self.stream.end_capture(), x, y)
        graph = self.state["ag_graph"][0]
        return self.replays(lambda: graph.launch(stream=self.stream)) * GRAPH_KERNELS / 1e3

    def close(self):
        pass


class Absent(Exception):
    """A measurement this framework cannot make here, and why."""


def sample(peer, key):
    if key == "launch":
        return peer.launch()
    if key == "sync_idle":
        return peer.sync_idle()
    if key == "fork_join":
        return peer.fork_join()
    if key == "alloc_free":
        return peer.alloc_free()
    if key.startswith(("pinned_", "pageable_")):
        return peer.copy(key)
    if key == "graph_replay":
        return peer.graph_replay()
    if key == "graph_loop":
        return peer.graph_loop()
    if key == "sgemm":
        return peer.sgemm()
    if key == "graph_all_gathers":
        return peer.graph_all_gathers()
    if key.startswith("all_reduce_"):
        return peer.all_reduce(key)
    if key == "barrier":
        return peer.barrier()
    if key.startswith("kernel_"):
        return peer_kernels.sample(peer, key, globals())
    raise Absent(f"no measurement named {key!r}")


def main():
    framework, ordinal = sys.argv[1], int(sys.argv[2])
    given = dict(arg.split("=", 1) for arg in sys.argv[3:] if "=" in arg)
    missing = [name for name in LOOP_SIZES if name not in given]
    if missing:
        print(f"absent bench gave no {', '.join(missing)}", flush=True)
        return
    globals().update({name: int(given[name]) for name in LOOP_SIZES})
    try:
        peer = {"torch": Torch, "cupy": CuPy}[framework](ordinal)
    except Exception as e:  # not importable, no GPU, ...: say why, do not fail
        print(f"absent {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        return
    print(f"ready {framework} {peer.version}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        try:
            print(f"ok {sample(peer, words[1]):.6f}", flush=True)
        except Absent as e:
            print(f"absent {e}".replace("\n", " "), flush=True)
        except Exception as e:
            print(f"error {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    peer.close()


if __name__ == "__main__":
    main()
