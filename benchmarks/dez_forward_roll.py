"""How far DelayedEZ's forward roll lands from the state it forecasts, and what acting from it costs.

Trains (or loads, ``--model``) a DelayedEZ CartPole model with the ``CartPole-v1`` entry of
``delayzoo/hyperparams/delayed_ez.yml`` (delay ``--train-delay``, random walk, p = 0.2, pending view),
then plays ``--episodes`` episodes under a random-walk delay of maximum ``--max-delay``. At every
decision ``t`` (delay ``d``), with ``s`` the encoding of the observation reached at ``t + d`` (CartPole is
deterministic: a copy of the env stepped through the pending actions gives it, and the script checks
that the env then reaches exactly that observation), it compares:

- the latent rolled by the dynamics from ``obs_t`` through ``pending_actions[:d]`` with ``s``: the
  L2 distance over ``||s||`` and the cosine;
- the argmax of the prior policy and of the search (no noise) at both latents (and of the search from
  the rolled latent with the roll's LSTM state, as the reference searches);
- ``pending_actions[:d]`` with the actions the env then executes (``info["executed_action"]``).

The returns of four ways of acting are reported with them: ``rolled`` (the agent: search from the
rolled latent with a fresh value-prefix LSTM), ``carried`` (the same root with the LSTM state of the
roll, as the reference does), ``oracle`` (search from the encoding of the true state at ``t + d``: what a perfect
forecast would give) and ``current`` (search from ``obs_t``, delay-oblivious acting). ``rolled`` far
below ``oracle`` means the forecast is the problem; both low means the model learned under delay is.

Run (one torch thread, ~3-6 CPU-min for the training on a 2-core machine)::

    python benchmarks/dez_forward_roll.py --train-delay 5 --seed 1 --save /tmp/dez-d5-s1.zip
    python benchmarks/dez_forward_roll.py --model /tmp/dez-d5-s1.zip
"""

from __future__ import annotations

import argparse
import pathlib
import time
from collections import defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.mcts import forecast_roots
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[1] / "delayzoo" / "hyperparams" / "delayed_ez.yml"
ZOO_ONLY = {"n_timesteps", "n_envs", "policy"}
MODES = ("rolled", "carried", "oracle", "current")


def entry_kwargs(name: str = "CartPole-v1") -> tuple[dict[str, Any], int, int]:
    """The DelayedEZ keywords, ``n_envs`` and ``n_timesteps`` of a YAML entry."""
    entry = yaml.safe_load(HYPERPARAMS.read_text())[name]
    kwargs = {key: value for key, value in entry.items() if key not in ZOO_ONLY}
    kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"], {"th": torch, "dict": dict})
    return kwargs, int(entry["n_envs"]), int(entry["n_timesteps"])


def make_env(max_delay: int) -> gym.Env:
    return PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(max_delay, p=0.2)))


def train(delay: int, seed: int, steps: int | None, overrides: dict[str, Any]) -> DelayedEZ:
    kwargs, n_envs, n_timesteps = entry_kwargs()
    kwargs.update(overrides)
    env = DummyVecEnv([lambda: make_env(delay)] * n_envs)
    model = DelayedEZ("MultiInputPolicy", env, seed=seed, **kwargs)
    return model.learn(steps or n_timesteps)


def true_future(env: gym.Env, pending: np.ndarray) -> np.ndarray:
    """The observation CartPole reaches from its current state through ``pending`` (a copy is stepped)."""
    copy = gym.make("CartPole-v1").unwrapped
    copy.reset()
    copy.state = np.array(env.unwrapped.state, dtype=np.float64)
    obs = np.array(copy.state, dtype=np.float32)
    for action in pending:
        obs, _, terminated, _, _ = copy.step(int(action))
        if terminated:  # the episode ends before the decision executes: nothing to compare beyond
            break
    return obs


def play(model: DelayedEZ, max_delay: int, episodes: int, mode: str, seed: int) -> tuple[list[float], dict]:
    """Returns of ``episodes`` episodes acting in ``mode`` (one env at a time), and the per-delay statistics."""
    policy, network = model.policy, model.policy.network
    rng = np.random.default_rng(seed)
    stats: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    returns = []
    for episode in range(episodes):
        env = make_env(max_delay)
        obs, _ = env.reset(seed=seed + episode)
        expected: dict[int, np.ndarray] = {}  # step -> observation forecast for it by the env copy
        queued: dict[int, int] = {}  # step -> pending action announced for it
        step, total, done = 0, 0.0, False
        while not done:
            delay = int(obs["delay"])
            pending = obs["pending_actions"][:delay]
            future = true_future(env, pending)
            expected.setdefault(step + delay, future)
            for k, action in enumerate(pending):
                queued.setdefault(step + k, int(action))
            with torch.inference_mode():
                current = network.initial_inference(torch.as_tensor(obs["observation"][None]))
                rolled, lstm_state = forecast_roots(
                    network, current.latent, torch.as_tensor(obs["pending_actions"][None]), torch.as_tensor([delay])
                )
                oracle = network.initial_inference(torch.as_tensor(future[None]))
                roots = {"rolled": rolled, "carried": rolled, "oracle": oracle.latent, "current": current.latent}
                logits = {name: network.prediction(latent)[1] for name, latent in roots.items()}
                searched = {
                    name: int(np.argmax(policy.mcts.search(
                        network, roots[name], logits[name], rng, False, lstm_state if name == "carried" else None
                    ).visits[0]))
                    for name in (MODES if mode == "current" else MODES[:3])
                }
                action = searched[mode]
            if delay > 0:
                row = stats[delay]
                truth = oracle.latent[0]
                gap = rolled[0] - truth
                row["l2"].append(float(gap.norm() / truth.norm().clamp_min(1e-8)))
                row["cosine"].append(float(torch.nn.functional.cosine_similarity(rolled[0], truth, dim=0)))
                row["prior_agrees"].append(float(logits["rolled"].argmax() == logits["oracle"].argmax()))
                row["search_agrees"].append(float(searched["rolled"] == searched["oracle"]))
                row["carried_agrees"].append(float(searched["carried"] == searched["oracle"]))
            obs, reward, terminated, truncated, info = env.step(action)
            step += 1
            total += float(reward)
            done = terminated or truncated
            if step - 1 in queued:
                stats[-1]["queue_matches_executed"].append(float(queued.pop(step - 1) == info["executed_action"]))
            if step in expected and not done:
                stats[-1]["future_obs_error"].append(float(np.abs(expected.pop(step) - obs["observation"]).max()))
        returns.append(total)
    return returns, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a saved DelayedEZ model (default: train one)")
    parser.add_argument("--train-delay", type=int, default=5, help="maximum random-walk delay while training")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the entry's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", help="save the trained model here")
    parser.add_argument("--max-delay", type=int, default=5, help="maximum random-walk delay while playing")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="ways of acting to play")
    parser.add_argument("-params", nargs="*", default=[], help="entry overrides, key:value (YAML values)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.model:
        model = DelayedEZ.load(args.model, device="cpu")
    else:
        overrides = {key: yaml.safe_load(value) for key, value in (item.split(":", 1) for item in args.params)}
        wall, cpu = time.perf_counter(), time.process_time()
        model = train(args.train_delay, args.seed, args.steps, overrides)
        print(f"trained {model.num_timesteps} steps at max delay {args.train_delay}, seed {args.seed}: "
              f"{time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU (this process)")
        if args.save:
            model.save(args.save)
    model.policy.set_training_mode(False)
    for mode in args.modes:
        returns, stats = play(model, args.max_delay, args.episodes, mode, seed=10_000)
        shown = ", ".join(f"{r:.0f}" for r in returns)
        print(f"acting from the {mode} latent: mean return {np.mean(returns):.1f} ({shown})")
        if mode == args.modes[0]:
            print(" delay  decisions  L2/|s|  cosine  prior-argmax-agrees  search-argmax-agrees  (carried LSTM)")
            for delay in sorted(d for d in stats if d > 0):
                row = stats[delay]
                print(f" {delay:5d}  {len(row['l2']):9d}  {np.mean(row['l2']):6.3f}  {np.mean(row['cosine']):6.3f}"
                      f"  {np.mean(row['prior_agrees']):19.3f}  {np.mean(row['search_agrees']):20.3f}"
                      f"  {np.mean(row['carried_agrees']):14.3f}")
            checks = stats[-1]
            print(f" pending action == executed action: {np.mean(checks['queue_matches_executed']):.3f} "
                  f"of {len(checks['queue_matches_executed'])}; max |forecast obs - reached obs|: "
                  f"{np.max(checks['future_obs_error']) if checks['future_obs_error'] else 0.0:.2e}")


if __name__ == "__main__":
    main()
