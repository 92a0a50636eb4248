"""PWM's three delay modes on CartPole-v1 under ``RandomWalkDelay(max_delay=5, p=0.2)``: learning curves.

Every run trains PWM with the ``CartPole-v1@delayed`` entry of ``hyperparams/pwm.yml`` (only
``delay_mode`` changes) on ``PendingActionsObservation(ExecutionDelay(CartPole-v1, RandomWalkDelay(5)))``
for the same budget, and evaluates it every ``--eval-every`` steps on ``--episodes`` deterministic
episodes of the same delayed env (episode seeds 10000, 10001, ...). It prints one line per
evaluation, then the curves side by side with each run's wall and process CPU time.

    python benchmarks/pwm_delay_modes.py                                   # 3 modes x seeds 0 1, 20k steps
    python benchmarks/pwm_delay_modes.py --modes forecast --seeds 0 --steps 6000 --json /tmp/curves.jsonl
    python benchmarks/pwm_delay_modes.py --max-delay 10 --init-action random   # the harder setting

``--max-delay`` sets the walk's bound (it starts there); ``--init-action random`` fills the queue at
reset with random actions instead of action 0, which pushes the cart left ``max_delay`` times before
the first decision executes (CartPole's pole falls after 8 to 10 such pushes).

``--json`` appends one JSON line per run (mode, seed, curve, times), so runs split across processes
can be collected; ``--table FILE`` prints the curves of such a file and exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import resource
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from delayzoo.agents.pwm import PWM
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[1] / "delayzoo" / "hyperparams" / "pwm.yml"
ENTRY = "CartPole-v1@delayed"
MODES = ("forecast", "augmented", "oblivious")


@dataclasses.dataclass(frozen=True)
class Setting:
    """The delayed env of a study: the random walk's bound (it starts there) and the actions queued at reset."""

    max_delay: int = 5
    init_action: str = "noop"

    def make_env(self) -> gym.Env:
        """CartPole-v1 under a random-walk execution delay, with the pending view."""
        delay = RandomWalkDelay(max_delay=self.max_delay, p=0.2)
        delayed = ExecutionDelay(gym.make("CartPole-v1"), delay, init_action=self.init_action)
        return PendingActionsObservation(delayed)


def evaluate(model: PWM, episodes: int = 5, setting: Setting = Setting()) -> float:
    """Mean return of ``episodes`` deterministic episodes (seeds 10000, 10001, ...)."""
    env = setting.make_env()
    scores = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        state, start, done, score = None, np.array([True]), False, 0.0
        while not done:
            action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            score, done, start = score + float(reward), terminated or truncated, np.array([False])
        scores.append(score)
    return float(np.mean(scores))


class Curve(BaseCallback):
    """Evaluate every ``every`` steps and print the result."""

    def __init__(self, every: int, episodes: int, setting: Setting, label: str) -> None:
        super().__init__()
        self.every, self.episodes, self.setting, self.label = every, episodes, setting, label
        self.points: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every == 0:
            self.points.append((self.num_timesteps, evaluate(self.model, self.episodes, self.setting)))
            print(f"{self.label} steps={self.points[-1][0]} eval_mean={self.points[-1][1]:.1f}", flush=True)
        return True


def build(mode: str, seed: int, setting: Setting = Setting()) -> PWM:
    """PWM with the ``CartPole-v1@delayed`` hyperparameters and ``delay_mode=mode``, on CPU."""
    config = dict(yaml.safe_load(HYPERPARAMS.read_text())[ENTRY])
    for key in ("delay", "delay_mode", "n_timesteps"):
        config.pop(key)
    policy, policy_kwargs = config.pop("policy"), eval(config.pop("policy_kwargs"))  # the file's own dict(...)
    env = setting.make_env()
    return PWM(policy, env, delay_mode=mode, policy_kwargs=policy_kwargs, seed=seed, device="cpu", **config)


def run(
    mode: str,
    seed: int,
    steps: int,
    eval_every: int = 1000,
    episodes: int = 5,
    setting: Setting = Setting(),
) -> dict[str, Any]:
    """Train one model and return its curve ``[(steps, mean return), ...]`` with its wall and CPU time."""
    label = f"{mode}/seed{seed}"
    wall, cpu = time.perf_counter(), time.process_time()
    model = build(mode, seed, setting)
    curve = Curve(eval_every, episodes, setting, label)
    model.learn(steps, callback=curve)
    return {
        "mode": mode,
        "seed": seed,
        "steps": steps,
        **dataclasses.asdict(setting),
        "curve": curve.points,
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def table(results: list[dict[str, Any]]) -> str:
    """The curves side by side, one column per run, then each run's best and last evaluation."""
    results = sorted(results, key=lambda r: (MODES.index(r["mode"]) if r["mode"] in MODES else 9, r["seed"]))
    names = [f"{r['mode']}/s{r['seed']}" for r in results]
    steps = sorted({point[0] for r in results for point in r["curve"]})
    lines = ["steps  " + " ".join(f"{name:>14}" for name in names)]
    for step in steps:
        cells = []
        for r in results:
            value = dict((int(s), v) for s, v in r["curve"]).get(step)
            cells.append(f"{value:14.1f}" if value is not None else " " * 14)
        lines.append(f"{step:>5}  " + " ".join(cells))
    lines.append("best   " + " ".join(f"{max(v for _, v in r['curve']):14.1f}" for r in results))
    lines.append("wall s " + " ".join(f"{r['wall_s']:14.0f}" for r in results))
    lines.append("cpu s  " + " ".join(f"{r['cpu_s']:14.0f}" for r in results))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=20_000, help="training env steps per run")
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--max-delay", type=int, default=5)
    parser.add_argument(
        "--init-action",
        choices=("noop", "random"),
        default="noop",
        help="the actions queued at reset (ExecutionDelay's init_action)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per run to this file")
    parser.add_argument("--table", type=pathlib.Path, help="print the curves of a --json file and exit")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    torch.set_num_threads(args.threads)
    setting = Setting(args.max_delay, args.init_action)
    results = []
    for seed in args.seeds:
        for mode in args.modes:
            result = run(mode, seed, args.steps, args.eval_every, args.episodes, setting)
            results.append(result)
            if args.json:
                with args.json.open("a") as file:
                    file.write(json.dumps(result) + "\n")
    print(table(results))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"threads={args.threads} load average now {os.getloadavg()} peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
