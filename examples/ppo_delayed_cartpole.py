"""SB3 PPO on CartPole-v1 under a random-walk execution delay, with and without the pending view.

Trains PPO twice for the same budget: once seeing only the observation (the delay-oblivious
baseline), once seeing the pending-action queue through ``PendingActionsObservation``; prints the
mean evaluation return of each. Run: ``python examples/ppo_delayed_cartpole.py [--steps N]``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay


def make_env(pending_view: bool, max_delay: int) -> gym.Env:
    """CartPole with per-game Monitor statistics below a random-walk execution delay."""
    env = ExecutionDelay(Monitor(gym.make("CartPole-v1")), RandomWalkDelay(max_delay=max_delay, p=0.2))
    return PendingActionsObservation(env) if pending_view else env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000, help="training env steps per agent")
    parser.add_argument("--max-delay", type=int, default=5, help="largest execution delay")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for pending_view in (False, True):
        policy = "MultiInputPolicy" if pending_view else "MlpPolicy"
        name = "PPO + pending view" if pending_view else "PPO (delay-oblivious)"
        print(f"training {name} for {args.steps} steps, RandomWalkDelay(max_delay={args.max_delay}, p=0.2)")
        model = PPO(policy, make_env(pending_view, args.max_delay), n_steps=512, batch_size=64,
                    learning_rate=1e-3, seed=args.seed, device="cpu")
        model.learn(args.steps, progress_bar=True)
        eval_env = make_env(pending_view, args.max_delay)
        eval_env.reset(seed=args.seed + 1000)
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
        print(f"{name}: mean return {mean:.1f} +/- {std:.1f} over 20 episodes")


if __name__ == "__main__":
    main()
