"""Forward + backward time of ``linear_recurrence``: parallel scan vs sequential loop, side by side.

The shapes are PWM's token mixer: decay ``(T, B, K, 1)`` against states ``k v^T`` of ``(T, B, K, V)``
with a 128 x 128 state per head (the paper's batch of 16 windows of 64 steps), then longer windows.
``autograd-loop`` is the plain per-step loop recorded by autograd (what a step-by-step model does).

    python benchmarks/scan_speed.py                       # T = 64, 256, 1024 at B = 16
    python benchmarks/scan_speed.py --lengths 1024 --batch 4 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from delayzoo.agents.common.checks import device_argument
from delayzoo.agents.common.scan import linear_recurrence


def autograd_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h, out = torch.zeros_like(b[0]), []
    for t in range(b.shape[0]):
        h = a[t] * h + b[t]
        out.append(h)
    return torch.stack(out)


def time_fwd_bwd(fn, a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    def once() -> float:
        if a.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(a, b)
        out.backward(torch.ones_like(out))
        if a.device.type == "cuda":
            torch.cuda.synchronize()
        a.grad = b.grad = None
        return time.perf_counter() - start

    once()  # warm-up (allocator, kernels)
    return statistics.median(once() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--state", type=int, default=128, help="key and value size of the state matrix")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", type=device_argument, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--loop-max-length", type=int, default=64, help="skip the autograd loop above this T")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    methods = {
        "parallel": lambda a, b: linear_recurrence(a, b, method="parallel"),
        "sequential": lambda a, b: linear_recurrence(a, b, method="sequential"),
        "autograd-loop": autograd_loop,
    }
    print(f"device={args.device} threads={torch.get_num_threads()} B={args.batch} state={args.state}x{args.state}")
    print(f"{'T':>6} " + " ".join(f"{name + ' ms':>17}" for name in methods) + "   seq/par  loop/par")
    for length in args.lengths:
        generator = torch.Generator().manual_seed(0)
        a = torch.rand(length, args.batch, args.state, 1, generator=generator).to(args.device).requires_grad_()
        b = torch.randn(length, args.batch, args.state, args.state, generator=generator).to(args.device)
        b.requires_grad_()
        times = {
            name: time_fwd_bwd(fn, a, b, args.repeats)
            for name, fn in methods.items()
            if name != "autograd-loop" or length <= args.loop_max_length
        }
        loop = times.get("autograd-loop", float("nan"))
        cells = " ".join(f"{1000 * times.get(name, float('nan')):17.2f}" for name in methods)
        print(
            f"{length:>6} {cells}   {times['sequential'] / times['parallel']:7.2f}  {loop / times['parallel']:8.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
