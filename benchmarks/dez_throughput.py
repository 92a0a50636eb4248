"""DelayedEZ training throughput on the zoo's CartPole-v1 settings, and where the time goes.

Runs the ``CartPole-v1`` entry of ``hyperparams/delayed_ez.yml`` (8 envs, 16 simulations, 2 updates per
vector step) on the delayed preset (random-walk delay, max 5, p = 0.2, pending view), one torch thread.
After ``learning_starts`` steps (not timed) it times ``--steps`` more env steps and prints env steps per
second of process CPU time and of wall time, and the main thread's CPU time per vector step split into
acting (the batched search of all envs), reanalysis (value bootstrap and policy reanalysis with the
target network, in the prefetch thread or process when it runs there), targets (replay sampling and target arrays)
and update (the rest of ``train``: the unrolled loss, backward, optimiser, priorities).

``--prefetch`` chooses where the next round's targets are computed while a round trains: ``thread`` (the
default, ``prefetch=True``), ``process`` (``prefetch="process"``: a worker process, whose CPU time is counted
in the CPU figures) or ``off`` (``prefetch=False``, also ``--no-prefetch``: in the update, to see how much of
the reanalysis the prefetch hides from the wall time). ``--before-prefetch`` sets it for the ``--before`` copy.

``--before DIR`` also measures another copy of delayzoo (e.g. ``git archive <commit> delayzoo | tar -x -C
DIR``, with the compiled tree copied in): the two are run alternately, ``--repeats`` times each, in
fresh processes, and the medians are printed side by side. Example::

    python benchmarks/dez_throughput.py --steps 800 --repeats 3 --before /tmp/dez-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("acting", "reanalysis", "targets", "update")


def _child(steps: int, seed: int, prefetch: str, device: str) -> dict[str, float]:
    import gymnasium as gym
    import torch
    import yaml
    from stable_baselines3.common.vec_env import DummyVecEnv

    from delayzoo import DelayedEZ
    from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

    torch.set_num_threads(1)
    entry = dict(yaml.safe_load((REPO / "delayzoo" / "hyperparams" / "delayed_ez.yml").read_text())["CartPole-v1"])
    for key in ("n_timesteps", "policy", "prefetch"):  # --prefetch replaces the entry's own setting
        entry.pop(key, None)
    n_envs = entry.pop("n_envs")
    entry["policy_kwargs"] = eval(entry["policy_kwargs"], {"th": torch, "dict": dict})  # the zoo's own syntax

    def make() -> gym.Env:
        return PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(5, p=0.2)))

    env = DummyVecEnv([make for _ in range(n_envs)])
    mode = {"thread": True, "off": False}.get(prefetch, prefetch)
    model = DelayedEZ("MultiInputPolicy", env, seed=seed, device=device, prefetch=mode, **entry)
    spent = dict.fromkeys(PARTS, 0.0)
    inside_train = dict.fromkeys(PARTS, 0.0)  # CPU of the training thread, taken out of "update"
    main = threading.main_thread()

    def timed(owner: object, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                used = time.thread_time() - start
                spent[part] += used
                if threading.current_thread() is main:
                    inside_train[part] += used

        setattr(owner, name, wrapper)

    model.learn(model.learning_starts)
    timed(model.policy, "act", "acting")
    timed(model, "_targets", "reanalysis")
    timed(model.replay_buffer, "sample", "targets")
    timed(model, "train", "update")
    worker = getattr(model, "_worker", None)  # older copies (--before) have none
    worker_cpu = worker.cpu_seconds if worker is not None else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    worker = getattr(model, "_worker", None)
    if worker is not None:  # prefetch="process": the worker's CPU time is reanalysis, and counts
        worker_cpu = worker.cpu_seconds - worker_cpu
        cpu += worker_cpu
        spent["reanalysis"] += worker_cpu
    spent["update"] -= inside_train["reanalysis"] + inside_train["targets"]
    vector_steps = steps / n_envs
    return {
        "steps_per_cpu_s": steps / cpu,
        "steps_per_wall_s": steps / wall,
        "cpu_s": cpu,
        "wall_s": wall,
        **{f"{part}_ms": 1000 * spent[part] / vector_steps for part in PARTS},
    }


def _run(code: Path, steps: int, seed: int, prefetch: str, device: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--steps", str(steps), "--seed", str(seed)]
    command += ["--device", device] if device != "cpu" else []  # older copies (--before) lack the flag
    command += {"thread": [], "off": ["--no-prefetch"]}.get(prefetch, ["--prefetch", prefetch])
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=code)
    if out.returncode:
        raise SystemExit(f"{' '.join(command)} failed (PYTHONPATH={code}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=800, help="timed env steps (over all envs)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per code version (medians are printed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", type=Path, help="another delayzoo copy to measure alternately (the 'before')")
    parser.add_argument("--prefetch", choices=["thread", "process", "off"], default="thread")
    parser.add_argument("--no-prefetch", action="store_true", help="--prefetch off: targets computed in the update")
    parser.add_argument("--before-prefetch", choices=["thread", "process", "off"], help="default: --prefetch")
    parser.add_argument("--device", default="cpu", help="torch device of the model (the split is CPU time either way)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_prefetch:
        args.prefetch = "off"
    args.before_prefetch = args.before_prefetch or args.prefetch
    if args.child:
        print(json.dumps(_child(args.steps, args.seed, args.prefetch, args.device)))
        return
    versions = {"after": REPO} if args.before is None else {"before": args.before, "after": REPO}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for repeat in range(args.repeats):
        for name, code in versions.items():
            prefetch = args.before_prefetch if name == "before" else args.prefetch
            results[name].append(_run(code, args.steps, args.seed + repeat, prefetch, args.device))
            print(f"# {name} run {repeat}: {results[name][-1]}", flush=True)
    load = os.getloadavg()
    print(f"CartPole-v1 zoo settings, 8 envs, delayed preset, {args.steps} timed env steps, 1 torch thread, "
          f"device {args.device}, prefetch {args.before_prefetch + ' before, ' if args.before else ''}"
          f"{args.prefetch}{' after' if args.before else ''}, "
          f"medians of {args.repeats} alternating runs; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    keys = ["steps_per_cpu_s", "steps_per_wall_s", "cpu_s", "wall_s"] + [f"{part}_ms" for part in PARTS]
    print(f"{'':22}" + "".join(f"{name:>12}" for name in results))
    for key in keys:
        print(f"{key:22}" + "".join(f"{statistics.median(r[key] for r in runs):12.1f}" for runs in results.values()))


if __name__ == "__main__":
    main()
