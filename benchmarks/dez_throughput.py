"""DelayedEZ training throughput on the zoo's CartPole-v1 (or MinAtar) settings, and where the time goes.

Runs the ``CartPole-v1`` entry of ``hyperparams/delayed_ez.yml`` (8 envs, 16 simulations, 2 updates per
vector step; ``--env MinAtar/Breakout-v1``: that entry, float 10x10 frames through the small conv net, the
extra ``delayzoo[minatar]``) on the delayed preset (random-walk delay, max 5, p = 0.2, pending view), one torch thread.
After ``learning_starts`` steps (not timed) it times ``--steps`` more env steps and prints env steps per
second of process CPU time and of wall time, the learner's busy fraction (wall time inside ``train``), and
the main thread's CPU time per vector step split into
acting (the batched search of all envs), reanalysis (value bootstrap and policy reanalysis with the
target network, in the prefetch thread or process when it runs there), targets (replay sampling and target arrays)
and update (the rest of ``train``: the unrolled loss, backward, optimiser, priorities).

``--prefetch`` chooses where the next round's targets are computed while a round trains: ``thread`` (the
default, ``prefetch=True``), ``process`` (``prefetch="process"``: a worker process, whose CPU time is counted
in the CPU figures) or ``off`` (``prefetch=False``, also ``--no-prefetch``: in the update, to see how much of
the reanalysis the prefetch hides from the wall time). ``--before-prefetch`` sets it for the ``--before`` copy.

``--self-play-actors N`` / ``--reanalysis-actors M`` run the same settings on Ray actors (``--envs-per-actor``,
default: the entry's 8 envs spread over the self-play actors) and print env steps/s (wall and process CPU,
the actors' included), the learner's busy fraction (time in ``train``) and its waiting fraction, timed from
the first step past ``learning_starts``; ``--sleep-ms`` makes each env step sleep (a slow simulator) and
``--no-updates`` takes the learner out of the bound, to measure the actor machinery itself::

    python benchmarks/dez_throughput.py --self-play-actors 2 --reanalysis-actors 1 --steps 2000
    python benchmarks/dez_throughput.py --self-play-actors 4 --envs-per-actor 2 --sleep-ms 20 --no-updates

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTS = ("acting", "reanalysis", "targets", "update")


ENVS = ("CartPole-v1", "MinAtar/Breakout-v1")
"""The entries of ``hyperparams/delayed_ez.yml`` this benchmark runs."""


def _setting(env_id: str, no_updates: bool = False) -> tuple[dict, int, Callable[[], Any]]:
    """``env_id``'s zoo entry as ``DelayedEZ`` keywords, its number of envs, and a maker of one delayed env
    (random-walk delay, max 5, p = 0.2, pending view)."""
    import gymnasium as gym
    import torch
    import yaml

    from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

    entry = dict(yaml.safe_load((REPO / "delayzoo" / "hyperparams" / "delayed_ez.yml").read_text())[env_id])
    for key in ("n_timesteps", "policy", "prefetch"):  # --prefetch replaces the entry's own setting
        entry.pop(key, None)
    n_envs = entry.pop("n_envs")
    entry["policy_kwargs"] = eval(entry["policy_kwargs"], {"th": torch, "dict": dict})  # the zoo's own syntax
    if no_updates:
        entry["gradient_steps"] = 0

    def make() -> gym.Env:
        if env_id.startswith("MinAtar/"):
            from delayzoo.wrappers import make_minatar

            base = make_minatar(env_id)
        else:
            base = gym.make(env_id)
        return PendingActionsObservation(ExecutionDelay(base, RandomWalkDelay(5, p=0.2)))

    return entry, n_envs, make


def _clock_train(model) -> list[float]:
    """Wrap ``model.train`` to add its wall time to the returned one-element list (the learner's busy time)."""
    in_train = [0.0]
    train = model.train

    def timed_train(*args, **kwargs):
        start = time.perf_counter()
        try:
            return train(*args, **kwargs)
        finally:
            in_train[0] += time.perf_counter() - start

    model.train = timed_train
    return in_train


def _worker(model: Any) -> Any:
    """The reanalysis worker process of a model, if it has one (older copies, run with --before, keep it
    in ``_worker``)."""
    round_targets = getattr(model, "_round_targets", None)
    return round_targets.worker if round_targets is not None else getattr(model, "_worker", None)


def _child(steps: int, seed: int, prefetch: str, device: str, env_id: str) -> dict[str, float]:
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    from delayzoo import DelayedEZ

    torch.set_num_threads(1)
    entry, n_envs, make = _setting(env_id)
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
    if hasattr(model, "_targets"):  # older copies (--before) reanalyse in a method of the learner
        timed(model, "_targets", "reanalysis")
    else:
        from delayzoo.agents.delayed_ez.reanalysis import Reanalysis

        timed(Reanalysis, "targets", "reanalysis")
    timed(model.replay_buffer, "sample", "targets")
    timed(model, "train", "update")
    in_train = _clock_train(model)
    worker = _worker(model)
    worker_cpu = worker.cpu_seconds if worker is not None else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    worker = _worker(model)
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
        "learner_busy": in_train[0] / wall,
        **{f"{part}_ms": 1000 * spent[part] / vector_steps for part in PARTS},
    }


class _SleepingStep:
    """An env wrapper whose step sleeps ``seconds`` first (an expensive simulator)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, env):
        import gymnasium as gym

        seconds = self.seconds

        class Sleeping(gym.Wrapper):
            def step(self, action):
                time.sleep(seconds)
                return self.env.step(action)

        return Sleeping(env)


def _actor_child(steps: int, seed: int, args: argparse.Namespace) -> dict[str, float]:
    """The ``--env`` entry on Ray actors (``--self-play-actors``, ``--reanalysis-actors``), steady state only:
    timed from the first step past ``learning_starts`` to the end, Ray and the actors already up."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray is imported: Ray on 127.0.0.1
    import gymnasium as gym
    import ray
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    from delayzoo import DelayedEZ

    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    entry, n_envs, make_delayed = _setting(args.env, args.no_updates)
    sleeping = _SleepingStep(args.sleep_ms / 1000)

    def make() -> gym.Env:
        env = make_delayed()
        return sleeping(env) if args.sleep_ms else env

    envs_per_actor = args.envs_per_actor or max(n_envs // max(args.self_play_actors, 1), 1)
    model = DelayedEZ(
        "MultiInputPolicy", make, seed=seed, self_play_actors=args.self_play_actors,
        reanalysis_actors=args.reanalysis_actors, envs_per_actor=envs_per_actor, **entry,
    )
    marks: dict[str, float] = {}
    in_train = _clock_train(model)

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            if "wall" not in marks and self.model.num_timesteps > self.model.learning_starts:
                marks.update(wall=time.perf_counter(), cpu=time.process_time(), steps=self.model.num_timesteps,
                             train=in_train[0], wait=self.model._actors.learner_wait,
                             actor_cpu=self.model._actors.actor_cpu)
            marks.update(end_wall=time.perf_counter(), end_cpu=time.process_time(), end_steps=self.model.num_timesteps,
                         end_train=in_train[0], end_wait=self.model._actors.learner_wait,
                         end_actor_cpu=self.model._actors.actor_cpu)
            return True

    model.learn(model.learning_starts + steps, callback=Clock())
    ray.shutdown()
    wall = marks["end_wall"] - marks["wall"]
    done = marks["end_steps"] - marks["steps"]
    cpu = marks["end_cpu"] - marks["cpu"] + marks["end_actor_cpu"] - marks["actor_cpu"]
    return {
        "steps_per_cpu_s": done / cpu,
        "steps_per_wall_s": done / wall,
        "cpu_s": cpu,
        "wall_s": wall,
        "learner_busy": (marks["end_train"] - marks["train"]) / wall,
        "learner_wait": (marks["end_wait"] - marks["wait"]) / wall,
    }


def _main_actors(args: argparse.Namespace) -> None:
    """Run :func:`_actor_child` ``--repeats`` times in fresh processes and print the medians."""
    if args.child:
        print(json.dumps(_actor_child(args.steps, args.seed, args)))
        return
    flags = ["--env", args.env, "--self-play-actors", str(args.self_play_actors),
             "--reanalysis-actors", str(args.reanalysis_actors), "--envs-per-actor", str(args.envs_per_actor),
             "--sleep-ms", str(args.sleep_ms)]
    flags += ["--no-updates"] if args.no_updates else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs = []
    for repeat in range(args.repeats):
        command = [sys.executable, str(Path(__file__).resolve()), "--child", "--steps", str(args.steps), "--seed",
                   str(args.seed + repeat), *flags]
        out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"# run {repeat}: {runs[-1]}", flush=True)
    load = os.getloadavg()
    print(f"{args.env} zoo settings on Ray actors: {' '.join(flags)}, {args.steps} timed env steps, 1 torch thread "
          f"per process, medians of {args.repeats} runs; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for key in runs[0]:
        print(f"{key:22}{statistics.median(r[key] for r in runs):12.3f}")


def _run(code: Path, steps: int, seed: int, prefetch: str, device: str, env_id: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--steps", str(steps), "--seed", str(seed)]
    command += ["--device", device] if device != "cpu" else []
    command += ["--env", env_id] if env_id != ENVS[0] else []
    command += {"thread": [], "off": ["--no-prefetch"]}.get(prefetch, ["--prefetch", prefetch])
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=code)
    if out.returncode:
        raise SystemExit(f"{' '.join(command)} failed (PYTHONPATH={code}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=ENVS, default=ENVS[0], help="the delayed_ez.yml entry to run")
    parser.add_argument("--steps", type=int, default=800, help="timed env steps (over all envs)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per code version (medians are printed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", type=Path, help="another delayzoo copy to measure alternately (the 'before')")
    parser.add_argument("--prefetch", choices=["thread", "process", "off"], default="thread")
    parser.add_argument("--no-prefetch", action="store_true", help="--prefetch off: targets computed in the update")
    parser.add_argument("--before-prefetch", choices=["thread", "process", "off"], help="default: --prefetch")
    parser.add_argument("--device", default="cpu", help="torch device of the model (the split is CPU time either way)")
    actors = parser.add_argument_group("Ray actors (timed in steady state, from the first step past learning_starts)")
    actors.add_argument("--self-play-actors", type=int, default=0, help="DelayedEZ(self_play_actors=N)")
    actors.add_argument("--reanalysis-actors", type=int, default=0, help="DelayedEZ(reanalysis_actors=M)")
    actors.add_argument("--envs-per-actor", type=int, default=0, help="default: the entry's 8 envs over the actors")
    actors.add_argument("--sleep-ms", type=float, default=0.0, help="each env step sleeps this long (a slow simulator)")
    actors.add_argument("--no-updates", action="store_true", help="gradient_steps=0: the learner is not the bound")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:  # a child may import another delayzoo copy (--before): the device is checked here
        from delayzoo.agents.common.checks import device_argument

        try:
            device_argument(args.device)
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument --device: {error}")
    if args.self_play_actors or args.reanalysis_actors:
        _main_actors(args)
        return
    if args.no_prefetch:
        args.prefetch = "off"
    args.before_prefetch = args.before_prefetch or args.prefetch
    if args.child:
        print(json.dumps(_child(args.steps, args.seed, args.prefetch, args.device, args.env)))
        return
    versions = {"after": REPO} if args.before is None else {"before": args.before, "after": REPO}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for repeat in range(args.repeats):
        for name, code in versions.items():
            prefetch = args.before_prefetch if name == "before" else args.prefetch
            results[name].append(_run(code, args.steps, args.seed + repeat, prefetch, args.device, args.env))
            print(f"# {name} run {repeat}: {results[name][-1]}", flush=True)
    load = os.getloadavg()
    print(f"{args.env} zoo settings, 8 envs, delayed preset, {args.steps} timed env steps, 1 torch thread, "
          f"device {args.device}, prefetch {args.before_prefetch + ' before, ' if args.before else ''}"
          f"{args.prefetch}{' after' if args.before else ''}, "
          f"medians of {args.repeats} alternating runs; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    keys = ["steps_per_cpu_s", "steps_per_wall_s", "cpu_s", "wall_s", "learner_busy"] + [f"{part}_ms" for part in PARTS]
    print(f"{'':22}" + "".join(f"{name:>12}" for name in results))
    for key in keys:
        print(f"{key:22}" + "".join(f"{statistics.median(r[key] for r in runs):12.3g}" for runs in results.values()))


if __name__ == "__main__":
    main()
