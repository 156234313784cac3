"""The kernel rows of `bench --case peers` for peer_server.py: axpy, dot and a transpose,
where the GPU pays, each written the way a user of the framework writes it, timed as
KERNEL_CALLS calls until done (as ours: benchmarks/src/peers/ours.rs), as GB/s of the
bytes the operation must move.

    PyTorch: y.add_(x, alpha=a); torch.dot(x, y); t.copy_(m.t())
    CuPy:    an ElementwiseKernel `y += a * x`; cupy.dot(x, y); cupy.copyto(t, m.T)
"""
import time

# Bytes an element of each key moves: axpy reads x and y and writes y, dot reads x and
# y, the transpose reads and writes each element.
BYTES = {"kernel_axpy": 12, "kernel_dot": 8, "kernel_transpose": 8}


def torch_operation(peer, key, n, side):
    torch, dev = peer.torch, peer.dev
    if key == "kernel_transpose":
        m = torch.rand(side, side, device=dev)
        t = torch.empty_like(m)
        return lambda: t.copy_(m.t())
    x, y = torch.rand(n, device=dev), torch.rand(n, device=dev)
    if key == "kernel_axpy":
        return lambda: y.add_(x, alpha=1e-3)
    return lambda: torch.dot(x, y)


def cupy_operation(peer, key, n, side):
    cupy = peer.cupy
    if key == "kernel_transpose":
        m = cupy.random.rand(side, side, dtype=cupy.float32)
        t = cupy.empty_like(m)
        return lambda: cupy.copyto(t, m.T)
    x = cupy.random.rand(n, dtype=cupy.float32)
    y = cupy.random.rand(n, dtype=cupy.float32)
    if key == "kernel_axpy":
        axpy = cupy.ElementwiseKernel("float32 a, float32 x", "float32 y", "y += a * x", "axpy")
        a = cupy.float32(1e-3)
        return lambda: axpy(a, x, y)
    return lambda: cupy.dot(x, y)


def sample(peer, key, sizes):
    """GB/s of KERNEL_CALLS calls of the key's operation on the peer's stream, until done.
    The operation and its memory are made at the key's first sample, on that stream."""
    if key not in BYTES:
        raise KeyError(key)
    n, side, calls = sizes["KERNEL_N"], sizes["KERNEL_SIDE"], sizes["KERNEL_CALLS"]
    on_stream = peer.on_stream()
    with on_stream:
        if key not in peer.state:
            make = torch_operation if hasattr(peer, "torch") else cupy_operation
            peer.state[key] = make(peer, key, n, side)
        operation = peer.state[key]
        peer.sync()
        t = time.perf_counter_ns()
        for _ in range(calls):
            operation()
        peer.sync()
        ns = time.perf_counter_ns() - t
    elements = side * side if key == "kernel_transpose" else n
    return BYTES[key] * elements * calls / ns  # bytes per ns = GB/s
