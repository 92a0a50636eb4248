"""Remake ``example_trace.csv``: per-step delays of a 50 Hz control loop over a modelled wireless link.

The trace is synthetic, made by us from the model below, not measured and not taken from any dataset.
The link is a two-state Gilbert-Elliott chain: in the good state a packet's one-way latency is 3 ms plus
an exponential jitter of mean 5 ms; in the bad state (congestion, retransmissions) 3 ms plus an exponential
of mean 45 ms. Each 20 ms step the chain moves good -> bad with probability 0.03 and bad -> good with 0.2.
Latencies are kept to 0.1 ms; the delay is the latency in whole 20 ms steps, rounded up, at most 6
(``TraceDelay.from_latencies(latency_ms, 20.0, max_delay=6)``).

Run ``python delayzoo/wrappers/data/make_example_trace.py`` from the repository's root; the output is the
same on every machine (NumPy's PCG64 generator, seed 2026).
"""

from __future__ import annotations

import csv
import pathlib
import sys

import numpy as np

STEPS = 1000
STEP_MS = 20.0
MAX_DELAY = 6


def latencies_ms(steps: int = STEPS, seed: int = 2026) -> np.ndarray:
    """One-way latencies of ``steps`` successive packets, in milliseconds, from the model above."""
    rng = np.random.default_rng(seed)
    bad = False
    latencies = np.empty(steps)
    for t in range(steps):
        bad = rng.random() < (0.8 if bad else 0.03)  # stay bad with 1 - 0.2, turn bad with 0.03
        latencies[t] = 3.0 + rng.exponential(45.0 if bad else 5.0)
    return np.round(latencies, 1)


def write(path: pathlib.Path) -> None:
    from delayzoo.wrappers import TraceDelay

    latencies = latencies_ms()
    delays = TraceDelay.from_latencies(latencies, STEP_MS, max_delay=MAX_DELAY).delays
    with open(path, "w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(["latency_ms", "delay"])
        writer.writerows((f"{latency:.1f}", int(delay)) for latency, delay in zip(latencies, delays))


if __name__ == "__main__":
    write(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).with_name("example_trace.csv"))
