"""How far PWM's forecast lands from the state the env reaches, and what acting from it costs.

Loads a PWM run trained in forecast mode under an execution delay (a zoo run; the trained model is kept in
its folder), rebuilds its evaluation env as :mod:`delayzoo.zoo.eval` does (delay process, filler actions,
pending view) and plays ``--episodes`` episodes per way of acting (episode seeds ``--seed``, ``--seed + 1``,
...). At every decision ``t`` with a delay ``d > 0``, a copy of the env below the delay wrapper, stepped
through the pending actions, gives the observations ``o_{t+1} .. o_{t+d}`` the env will reach (the script
checks that the env then reaches them), and the forecast is compared with the oracle, the posterior of
those observations with the sequence model stepped through them:

- ``match``: the share of the latent's categoricals whose forecast (the prior's modes rolled from ``z_t``
  through the pending actions) equals the posterior's mode at ``t + d``;
- ``decoded``: the mean absolute error of the decoded forecast against ``o_{t+d}`` (env units; models
  with a vector decoder), beside ``stale`` (``|o_t - o_{t+d}|``, what acting on the current observation
  ignores) and ``floor`` (the decoded posterior's own error);
- ``gap <mode>``: the mean ``|a_mode - a_oracle|`` of the deterministic actions in [-1, 1] (``Box``), or
  the share of actions that differ from the oracle's (``Discrete``).

Ways of acting: ``forecast16``, ``forecast1`` and ``forecast0`` (the agent with ``forecast_samples`` 16,
its default, 1 and 0: the mean action over 16 sampled forecasts, one sample, the prior's modes),
``oracle`` (acting from a perfect forecast) and ``current`` (the actor at the current observation,
delay-oblivious acting). ``forecast16`` far below ``oracle`` means the forecast costs return; both low
means the policy learned under delay is what is weak. The table is gathered while the first mode plays.

Train a model, then measure it (one torch thread; Pendulum-v1 about 14 CPU-min at 20k steps)::

    python -m delayzoo.zoo.train --algo pwm --env Pendulum-v1 --seed 100 -f /tmp/pend --delay 5 \\
        --delay-process random-walk --init-action random --pending-view -params delay_mode:forecast
    python benchmarks/pwm_forecast_error.py -f /tmp/pend
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from delayzoo.agents.common.pending import read_pending_view
from delayzoo.agents.common.transforms import symexp
from delayzoo.agents.pwm import PWM
from delayzoo.agents.pwm.forecast import forecast_state
from delayzoo.wrappers.delay import ExecutionDelay, find_wrapper
from delayzoo.zoo.runs import Run, find_runs
from delayzoo.zoo.vec_envs import make_eval_env

MODES = ("forecast16", "forecast1", "forecast0", "oracle", "current")


def true_future(below_delay: gym.Env, pending: np.ndarray) -> list[np.ndarray]:
    """The observations a copy of ``below_delay`` (the env under the delay wrapper) reaches through
    ``pending`` (env units), stopping where its episode ends."""
    env = copy.deepcopy(below_delay)
    reached = []
    for action in pending:
        obs, _, terminated, truncated, _ = env.step(action)
        reached.append(np.asarray(obs, dtype=np.float32))
        if terminated or truncated:
            break
    return reached


class Probe:
    """The model's pieces the measurement reads, for one env at a time."""

    def __init__(self, model: PWM) -> None:
        self.policy = model.policy
        self.world = self.policy.world_model
        self.actor = self.policy.actor_critic.actor
        self.discrete = isinstance(self.policy.action_space, spaces.Discrete)
        self.decodes = self.world.vector_decoder is not None and self.world.layout.image_shape is None

    def posterior(self, observation: np.ndarray) -> torch.Tensor:
        """The posterior's modes ``(1, Z)`` of one env observation."""
        obs = torch.as_tensor(observation[None], device=self.policy.device)
        return self.world.sample_latent(self.world.encode(obs, batch_dims=1), deterministic=True)

    def decode(self, latent: torch.Tensor) -> np.ndarray:
        """The decoded observation of a latent (env units)."""
        return symexp(self.world.vector_decoder(latent))[0].cpu().numpy()

    def greedy(self, latent: torch.Tensor, readout: torch.Tensor) -> torch.Tensor:
        """The actor's deterministic raw action at ``[z, h]``."""
        return self.actor.sample(self.world.features(latent, readout), deterministic=True)[0]

    def env_action(self, raw: torch.Tensor) -> Any:
        """The env's action of a raw one."""
        if self.discrete:
            return int(raw[0])
        space = self.policy.action_space
        return np.clip(self.policy.unscale_action(raw.clamp(-1.0, 1.0)[0].cpu().numpy()), space.low, space.high)


def oracle_latent(probe: Probe, latent: torch.Tensor, state: dict, pending: torch.Tensor, future: list) -> tuple:
    """The latent and state at ``t + d`` with the posterior of the reached observations in place of the prior."""
    for step, observation in enumerate(future):
        _, state = probe.world.step(latent, pending[:, step], state)
        latent = probe.posterior(observation)
    return latent, state


def play(probe: Probe, run: Run, mode: str, episodes: int, seed: int) -> tuple[list[float], dict]:
    """Returns of ``episodes`` episodes acting in ``mode``, and the per-delay statistics."""
    policy, world = probe.policy, probe.world
    stats: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    vec_env = make_eval_env(run)
    env = vec_env.envs[0]
    below = find_wrapper(env, ExecutionDelay).env
    returns = []
    try:
        for episode in range(episodes):
            torch.manual_seed(seed + episode)
            obs, _ = env.reset(seed=seed + episode)
            state = policy.initial_state(1)
            expected: dict[int, np.ndarray] = {}
            step, total, done = 0, 0.0, False
            while not done:
                tensors = {key: torch.as_tensor(np.asarray(value)[None]) for key, value in obs.items()}
                view = read_pending_view(tensors, policy.action_space)
                delay = int(view.delays[0])
                pending = policy.encode_pending(view.actions)
                future = true_future(below, view.actions[0, :delay].numpy()) if delay else []
                complete = bool(delay) and len(future) == delay
                if complete:
                    expected.setdefault(step + delay, future[-1])
                latent = probe.posterior(obs["observation"])
                raws = {}
                for samples in (16, 1, 0):
                    policy.forecast_samples = samples
                    starts = torch.zeros(1, dtype=torch.bool)
                    raws[f"forecast{samples}"] = policy.act(tensors, state, starts, deterministic=True)[0]
                ahead, ahead_state = oracle_latent(probe, latent, state, pending, future) if complete else (None, None)
                raws["oracle"] = probe.greedy(ahead, ahead_state["readout"]) if complete else raws["forecast0"]
                raws["current"] = probe.greedy(latent, state["readout"])
                if complete and mode == MODES[0]:
                    row = stats[delay]
                    rolled, _ = forecast_state(world, latent, state, pending, view.delays, deterministic=True)
                    classes = world.config.classes
                    same = rolled.reshape(-1, classes).argmax(-1) == ahead.reshape(-1, classes).argmax(-1)
                    row["match"].append(float(same.float().mean()))
                    if probe.decodes:
                        truth = future[-1]
                        row["decoded"].append(float(np.abs(probe.decode(rolled) - truth).mean()))
                        row["floor"].append(float(np.abs(probe.decode(ahead) - truth).mean()))
                        row["stale"].append(float(np.abs(np.asarray(obs["observation"]) - truth).mean()))
                    for name, raw in raws.items():
                        if name != "oracle":
                            gap = raw != raws["oracle"] if probe.discrete else (raw - raws["oracle"]).abs().mean()
                            row[f"gap {name}"].append(float(gap))
                raw = raws[mode]
                executed = pending[:, 0] if delay else policy.encode_action(raw)
                _, state = world.step(latent, executed, state)
                obs, reward, terminated, truncated, _ = env.step(probe.env_action(raw))
                step += 1
                total += float(reward)
                done = terminated or truncated
                if step in expected and not done:
                    reached = np.asarray(obs["observation"], dtype=np.float32)
                    stats[-1]["copy_error"].append(float(np.abs(expected.pop(step) - reached).max()))
            returns.append(total)
    finally:
        vec_env.close()
    return returns, stats


def table(stats: dict) -> list[str]:
    """The per-delay statistics as text lines."""
    columns = ["match", "decoded", "stale", "floor", *(f"gap {mode}" for mode in MODES if mode != "oracle")]
    widths = [max(7, len(name)) for name in columns]
    lines = [" delay  decisions  " + "  ".join(f"{name:>{width}}" for name, width in zip(columns, widths))]
    for delay in sorted(d for d in stats if d > 0):
        row = stats[delay]
        values = [
            f"{np.mean(row[name]):{width}.3f}" if row.get(name) else f"{'-':>{width}}"
            for name, width in zip(columns, widths)
        ]
        lines.append(f" {delay:5d}  {len(row['match']):9d}  " + "  ".join(values))
    checks = stats.get(-1, {}).get("copy_error", [])
    lines.append(f" max |copy's observation - reached observation| over {len(checks)} decisions: "
                 f"{max(checks) if checks else 0.0:.2e}")
    return lines


def parser() -> argparse.ArgumentParser:
    """The command line."""
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("-f", "--log-folder", required=True, help="a zoo log folder holding one PWM run")
    cli.add_argument("--model", help="the model to load (default: the run's final model)")
    cli.add_argument("--episodes", type=int, default=8, help="episodes per way of acting")
    cli.add_argument("--seed", type=int, default=10_000, help="seed of the first episode")
    cli.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="ways of acting to play")
    cli.add_argument("--json", help="append one JSON line (returns per mode, the per-delay table) to this file")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    torch.set_num_threads(1)
    runs = find_runs(args.log_folder, algos=["pwm"])
    if len(runs) != 1:
        raise SystemExit(f"{args.log_folder} holds {len(runs)} PWM runs: pass the folder of exactly one")
    run = runs[0]
    model = PWM.load(args.model or str(run.final_model), device="cpu")
    if model.policy.delay_mode != "forecast":
        raise SystemExit(f"the run's model acts in {model.policy.delay_mode!r} mode: this measures forecast mode")
    model.policy.set_training_mode(False)
    probe = Probe(model)
    record: dict[str, Any] = {"run": str(run.path), "model": args.model or str(run.final_model), "returns": {}}
    with torch.no_grad():
        for mode in args.modes:
            wall, cpu = time.perf_counter(), time.process_time()
            returns, stats = play(probe, run, mode, args.episodes, args.seed)
            record["returns"][mode] = returns
            print(f"{mode:>10}: mean return {np.mean(returns):8.1f} ({', '.join(f'{r:.0f}' for r in returns)}); "
                  f"{time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
            if mode == args.modes[0] == MODES[0]:
                lines = table(stats)
                print("\n".join(lines))
                record["table"] = {str(delay): {name: float(np.mean(v)) for name, v in row.items()}
                                   for delay, row in stats.items()}
    if args.json:
        with open(args.json, "a") as handle:
            handle.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
