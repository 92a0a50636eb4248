"""DelayedEZ on CartPole-v1 with and without a random-walk execution delay: learning curves.

Every run trains DelayedEZ with the ``CartPole-v1`` entry of ``hyperparams/delayed_ez.yml`` (the same
hyperparameters at every delay) and evaluates it every ``--eval-every`` steps on ``--episodes``
deterministic episodes (8 envs, episode seeds from 10000) of the env it trains on. At a maximum delay of
0 that is plain CartPole-v1 with the entry's policy (the undelayed reference, one run per seed: the
modes are the same agent there); above 0 it is
``PendingActionsObservation(ExecutionDelay(CartPole-v1, RandomWalkDelay(max_delay, p=0.2)))`` with
``MultiInputPolicy``, in mode ``forward`` (the forward model) or ``oblivious`` (the paper's
Oblivious-EZ, ``forward_model=False``); ``--init-action random`` queues random actions at reset instead of
no-ops (the delay benchmark's setting: five no-ops push the cart left before the agent acts, and from some
starts the pole falls before the first decision is executed). A run's return is the mean of its last 3 evaluations; the
retained fraction is the mean return over the seeds at a delay over the mean at delay 0.

    python benchmarks/dez_delay_learning.py --max-delay 0 --seeds 0 --json /tmp/dez.jsonl
    python benchmarks/dez_delay_learning.py --max-delay 5 --modes forward oblivious --seeds 0 --json /tmp/dez.jsonl
    python benchmarks/dez_delay_learning.py --table /tmp/dez.jsonl

``-params`` overrides the entry's values (YAML values); a keyword group's keys (``search_kwargs:
{method: gumbel}``) override the entry's group key by key, the rest of the group staying the entry's.

``--json`` appends one JSON line per run (curve, the mean ``reanalysis/*`` logs between evaluations, wall and
CPU seconds, the reanalysis worker's included), so runs split across processes can be collected;
``--table FILE`` prints them and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.version import source_commit
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[1] / "delayzoo" / "hyperparams" / "delayed_ez.yml"
ENTRY = "CartPole-v1"
MODES = ("forward", "oblivious")
LAST = 3


def make_env(max_delay: int, init_action: str = "noop") -> gym.Env:
    """CartPole-v1, under a random-walk delay with the pending view when ``max_delay > 0`` (``init_action``: the
    actions queued at reset), in a Monitor."""
    env = gym.make("CartPole-v1")
    if max_delay > 0:
        delay = RandomWalkDelay(max_delay=max_delay, p=0.2)
        env = PendingActionsObservation(ExecutionDelay(env, delay, init_action=init_action))
    return Monitor(env)


def build(
    max_delay: int, mode: str, seed: int, overrides: dict[str, Any] | None = None, init_action: str = "noop"
) -> tuple[DelayedEZ, int]:
    """DelayedEZ with the entry's hyperparameters (``forward_model`` from ``mode``, then ``overrides``) and the
    entry's ``n_timesteps``."""
    config = dict(yaml.safe_load(HYPERPARAMS.read_text())[ENTRY])
    config["forward_model"] = mode == "forward"
    for key, value in (overrides or {}).items():  # before the pops, so that policy_kwargs can be overridden too
        groups = ("search_kwargs", "replay_buffer_kwargs", "actor_kwargs")
        merge = key in groups and isinstance(value, dict) and isinstance(config.get(key), dict)
        config[key] = {**config[key], **value} if merge else value  # a group's keys override the entry's one by one
    n_envs, steps, policy = config.pop("n_envs"), int(config.pop("n_timesteps")), config.pop("policy")
    policy_kwargs = eval(config.pop("policy_kwargs"), {"th": torch, "dict": dict})  # the file's own dict(...)
    if max_delay > 0:
        policy = "MultiInputPolicy"
    env = DummyVecEnv([lambda: make_env(max_delay, init_action)] * n_envs)
    return DelayedEZ(policy, env, policy_kwargs=policy_kwargs, seed=seed, device="cpu", **config), steps


class Curve(BaseCallback):
    """Evaluate every ``every`` steps (``episodes`` deterministic episodes) and print the result; keep the mean of
    each ``reanalysis/*`` log over the rounds between two evaluations."""

    def __init__(self, every: int, episodes: int, max_delay: int, label: str, init_action: str = "noop") -> None:
        super().__init__()
        self.every, self.episodes, self.label = every, episodes, label
        self.env = DummyVecEnv([lambda: make_env(max_delay, init_action)] * 8)
        self.points: list[tuple[int, float]] = []
        self.reanalysis: list[tuple[int, dict[str, float]]] = []
        self._logged: dict[str, list[float]] = {}
        self._next = every

    def _on_rollout_start(self) -> None:  # the previous round's logs are still in the logger here
        for key, value in self.model.logger.name_to_value.items():
            if key.startswith("reanalysis/"):
                self._logged.setdefault(key.removeprefix("reanalysis/"), []).append(float(value))

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next += self.every
            self.env.seed(10_000)
            mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes=self.episodes, deterministic=True)
            self.points.append((self.num_timesteps, float(mean)))
            shares = {key: round(float(np.mean(values)), 4) for key, values in sorted(self._logged.items())}
            self.reanalysis.append((self.num_timesteps, shares))
            self._logged = {}
            print(f"{self.label} steps={self.num_timesteps} eval_mean={mean:.1f} reanalysis={shares}", flush=True)
        return True


def final_return(result: dict[str, Any]) -> float:
    """A run's return: the mean of its last :data:`LAST` evaluations."""
    return float(np.mean([value for _, value in result["curve"][-LAST:]]))


def run(max_delay: int, mode: str, seed: int, steps: int | None = None, eval_every: int = 2000,
        episodes: int = 16, save_dir: pathlib.Path | None = None,
        overrides: dict[str, Any] | None = None, init_action: str = "noop") -> dict[str, Any]:
    """Train one model and return its curve ``[(steps, mean return), ...]`` with its wall and CPU time
    (the model is saved in ``save_dir`` as ``d<max_delay>-<mode>-s<seed>.zip`` when given); ``init_action``
    fills the delay queue at reset in training and evaluation."""
    label = f"d{max_delay}/{mode}/seed{seed}"
    wall, cpu = time.perf_counter(), time.process_time()
    model, entry_steps = build(max_delay, mode, seed, overrides, init_action)
    curve = Curve(eval_every, episodes, max_delay, label, init_action)
    model.learn(steps or entry_steps, callback=curve)
    worker = model._round_targets.worker
    worker_cpu = worker.cpu_seconds if worker is not None else 0.0
    result = {
        "max_delay": max_delay,
        "mode": mode,
        "seed": seed,
        "overrides": overrides or {},
        "init_action": init_action if max_delay > 0 else None,
        "steps": model.num_timesteps,
        "curve": curve.points,
        "reanalysis": curve.reanalysis,
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu + worker_cpu, 1),
        "threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": source_commit(),
    }
    if worker is not None:
        worker.close()
    if save_dir is not None:
        model.save(save_dir / f"d{max_delay}-{mode}-s{seed}.zip")
    return result


def variant(result: dict[str, Any]) -> str:
    """A run's mode, with its overrides if any (``forward[forecast_policy=store]``)."""
    extra = ",".join(f"{key}={value}" for key, value in result.get("overrides", {}).items())
    return f"{result['mode']}[{extra}]" if extra else result["mode"]


def table(results: list[dict[str, Any]]) -> str:
    """The curves side by side, each run's return and CPU time, and the retained fractions."""
    results = sorted(results, key=lambda r: (r["max_delay"], variant(r), r["seed"]))
    names = [f"d{r['max_delay']}/{variant(r)[:3]}{'*' if r.get('overrides') else ''}/s{r['seed']}" for r in results]
    steps = sorted({int(point[0]) for r in results for point in r["curve"]})
    lines = ["steps  " + " ".join(f"{name:>11}" for name in names)]
    for step in steps:
        cells = []
        for r in results:
            value = {int(s): v for s, v in r["curve"]}.get(step)
            cells.append(f"{value:11.1f}" if value is not None else " " * 11)
        lines.append(f"{step:>5}  " + " ".join(cells))
    lines.append("last3  " + " ".join(f"{final_return(r):11.1f}" for r in results))
    lines.append("cpu s  " + " ".join(f"{r['cpu_s']:11.0f}" for r in results))
    lines.append("wall s " + " ".join(f"{r['wall_s']:11.0f}" for r in results))
    undelayed = [final_return(r) for r in results if r["max_delay"] == 0]
    reference = float(np.mean(undelayed)) if undelayed else float("nan")
    groups: dict[tuple[int, str], dict[int, float]] = {}
    for r in results:
        groups.setdefault((r["max_delay"], variant(r)), {})[r["seed"]] = final_return(r)
    for (delay, mode), by_seed in groups.items():
        mean = float(np.mean(list(by_seed.values())))
        seeds = ", ".join(f"s{seed} {value:.1f}" for seed, value in sorted(by_seed.items()))
        lines.append(f"max delay {delay} {mode}: mean {mean:.1f} over {len(by_seed)} seeds ({seeds}), "
                     f"min {min(by_seed.values()):.1f}, {mean / reference:.0%} of the delay-0 mean {reference:.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-delay", type=int, default=5)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["forward"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="training env steps per run (default: the entry's)")
    parser.add_argument("--eval-every", type=int, default=2000)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--init-action", choices=["noop", "random"], default="noop",
                        help="the actions queued at reset (ExecutionDelay's init_action); the study grid uses random")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per run to this file")
    parser.add_argument("-params", nargs="*", default=[], help="hyperparameter overrides, key:value (YAML values)")
    parser.add_argument("--save-dir", type=pathlib.Path, help="save each trained model in this folder")
    parser.add_argument("--table", type=pathlib.Path, help="print the curves of a --json file and exit")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    torch.set_num_threads(args.threads)
    modes = ["forward"] if args.max_delay == 0 else args.modes
    overrides = {key: yaml.safe_load(value) for key, value in (item.split(":", 1) for item in args.params)}
    results = []
    for seed in args.seeds:
        for mode in modes:
            result = run(
                args.max_delay, mode, seed, args.steps, args.eval_every, args.episodes, args.save_dir, overrides,
                args.init_action,
            )
            results.append(result)
            if args.json:
                with args.json.open("a") as file:
                    file.write(json.dumps(result) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
