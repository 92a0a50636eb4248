"""Evaluation restarts a recurrent agent's state at life losses (delayzoo.agents.common.evaluation)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.common.evaluation import LifeLossEpisodeStarts, evaluate_policy
from delayzoo.agents.pwm import PWM
from delayzoo.zoo.eval import evaluate_model


class LivesEnv(gym.Env):
    """3 lives, one lost every 4 steps (``info["life_loss"]``); the game ends with the last one. Reward 1 per step."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.lives = 0, 3
        return self._obs(), {"lives": self.lives, "life_loss": False}

    def _obs(self):
        return np.full(3, np.sin(self.t), dtype=np.float32)

    def step(self, action):
        self.t += 1
        life_loss = self.t % 4 == 0
        self.lives -= int(life_loss)
        return self._obs(), 1.0, self.lives == 0, False, {"lives": self.lives, "life_loss": life_loss}


class Spy:
    """A model whose ``predict`` records ``episode_start`` and delegates to ``inner`` (or acts 0)."""

    def __init__(self, inner=None):
        self.inner, self.starts, self.states = inner, [], []

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        self.starts.append(np.asarray(episode_start, dtype=bool).copy())
        if self.inner is None:
            return np.zeros(len(observation), dtype=np.int64), state
        action, state = self.inner.predict(observation, state=state, episode_start=episode_start, deterministic=True)
        self.states.append(state)
        return action, state


def monitored_vec_env(n=1):
    return DummyVecEnv([lambda: Monitor(LivesEnv()) for _ in range(n)])


EXPECTED_STARTS = [True, False, False, False, True, False, False, False, True, False, False, False]
"""Per call of predict over one 12-step game: the start, then after each of the two life losses."""


def test_evaluate_policy_restarts_the_state_at_life_losses_and_scores_whole_games():
    spy = Spy()
    rewards, lengths = evaluate_policy(spy, monitored_vec_env(), n_eval_episodes=1, return_episode_rewards=True)
    assert rewards == [12.0] and lengths == [12]
    assert [bool(start[0]) for start in spy.starts] == EXPECTED_STARTS
    plain = Spy()
    sb3_evaluate_policy(plain, monitored_vec_env(), n_eval_episodes=1)  # SB3 alone carries the state over
    assert [bool(start[0]) for start in plain.starts] == [True] + [False] * 11


def test_pwm_state_restarts_at_a_life_loss_in_evaluate_policy():
    model = PWM("MlpPolicy", LivesEnv(), learning_starts=64, sequence_length=8, batch_size=2, seed=0, device="cpu",
                policy_kwargs=dict(world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, seq_width=16),
                                   actor_critic_kwargs=dict(units=16)))
    spy = Spy(model)
    evaluate_policy(spy, monitored_vec_env(), n_eval_episodes=1)
    obs = LivesEnv().reset()[0][None]
    fresh = model.predict(np.full((1, 3), np.sin(4), dtype=np.float32), deterministic=True)[1]
    # The call after the first life loss (step 4) starts from the initial state, like a fresh episode.
    for after, expected in zip(spy.states[4], fresh):
        np.testing.assert_allclose(after, expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(spy.states[3][0], model.predict(obs, deterministic=True)[1][0])


def test_eval_callback_on_the_wrapped_env_restarts_at_life_losses():
    spy_env = LifeLossEpisodeStarts(monitored_vec_env())
    model = PWM("MlpPolicy", LivesEnv(), learning_starts=64, sequence_length=8, batch_size=2, seed=0, device="cpu",
                policy_kwargs=dict(world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, seq_width=16),
                                   actor_critic_kwargs=dict(units=16)))
    callback = EvalCallback(spy_env, n_eval_episodes=1, eval_freq=20, verbose=0)
    model.learn(20, callback=callback)
    assert callback.last_mean_reward == 12.0  # whole games, not lives


def test_wrapper_warns_without_a_monitor():
    with pytest.warns(UserWarning, match="Monitor"):
        LifeLossEpisodeStarts(DummyVecEnv([LivesEnv]))


def test_zoo_evaluation_restarts_the_state_at_life_losses():
    spy = Spy()
    assert evaluate_model(spy, monitored_vec_env(), seeds=[0], deterministic=True) == [12.0]
    assert [bool(start[0]) for start in spy.starts] == EXPECTED_STARTS
