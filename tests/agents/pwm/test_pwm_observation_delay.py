"""PWM's forecast mode over an ObservationDelay: the replay holds the undelayed trajectory, the carried
state follows the env's own steps, and the decision is forecast through the unobserved and queued actions."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.pwm import PWM
from delayzoo.agents.pwm.forecast import forecast_state
from delayzoo.agents.pwm.policies import SHOWN_KEYS, STATE_KEYS
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation, RandomWalkDelay
from tests.agents.pwm.test_pwm_agent import FAST, ImageEnv


class Trajectory(gym.Wrapper):
    """Records the env's own steps as the replay should hold them: (observation before, action executed,
    reward, terminated, first step of an episode)."""

    def __init__(self, env):
        super().__init__(env)
        self.rows, self.frames = [], []
        self._previous, self._first = None, True

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        self._previous, self._first = obs, True
        self.frames.append(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.rows.append((self._previous, np.asarray(action).copy(), float(reward), terminated, self._first))
        self._previous, self._first = obs, False
        self.frames.append(obs)
        return obs, reward, terminated, truncated, info


class Scripted:
    """A delay process that plays a fixed list of delays, then the last one."""

    def __init__(self, delays):
        self.delays, self.max_delay, self.t = list(delays), max(delays), 0

    def reset(self, rng):
        self.t = 0
        return self.delays[0]

    def step(self, rng):
        self.t += 1
        return self.delays[min(self.t, len(self.delays) - 1)]


def obs_delayed(env, obs_delay=None, execution_delay=None):
    obs_delay = RandomWalkDelay(max_delay=4, p=0.3) if obs_delay is None else obs_delay
    if execution_delay is not None:
        env = ExecutionDelay(env, execution_delay)
    return PendingActionsObservation(ObservationDelay(env, obs_delay))


def assert_replay_is_the_trajectory(buffer, trajectory, env_index=0, transpose=False, scale=lambda a: a):
    stored = buffer.stored_steps()
    assert stored >= len(trajectory.rows) - 5, "rows wait at most max_obs_delay + 1 steps"
    for row in range(stored):
        obs, action, reward, terminated, first = trajectory.rows[row]
        frame = np.transpose(obs, (2, 0, 1)) if transpose else obs
        assert np.allclose(buffer.observations[None][row, env_index], frame), row
        assert np.allclose(np.asarray(buffer.actions[row, env_index]), scale(action)), row
        assert buffer.rewards[row, env_index] == pytest.approx(reward), row
        assert buffer.terminals[row, env_index] == terminated, row
        assert buffer.is_first[row, env_index] == first, row


@pytest.mark.parametrize("with_execution_delay", [False, True])
def test_replay_holds_the_undelayed_env_steps_with_their_executed_actions(with_execution_delay):
    trajectory = Trajectory(gym.make("CartPole-v1"))
    execution = RandomWalkDelay(max_delay=3, p=0.3) if with_execution_delay else None
    model = PWM("MultiInputPolicy", obs_delayed(trajectory, execution_delay=execution), **FAST).learn(120)
    assert model.delay_mode == "forecast"
    assert sum(first for *_, first in trajectory.rows) >= 2, "several episodes, so ends and starts are checked"
    assert_replay_is_the_trajectory(model.replay_buffer, trajectory)


def test_executed_box_actions_are_stored_normalised_like_decided_ones():
    trajectory = Trajectory(gym.make("Pendulum-v1"))
    execution = RandomWalkDelay(max_delay=2, p=0.3)
    model = PWM("MultiInputPolicy", obs_delayed(trajectory, execution_delay=execution), **FAST).learn(60)
    assert_replay_is_the_trajectory(model.replay_buffer, trajectory, scale=lambda a: a / 2.0)  # Box [-2, 2]


def test_replay_rows_of_a_vector_env_keep_each_envs_own_order():
    trajectories = [Trajectory(gym.make("CartPole-v1")) for _ in range(2)]
    delays = [RandomWalkDelay(max_delay=4, p=0.5), Scripted([0])]  # one env's rows arrive late and in bursts
    venv = DummyVecEnv([lambda t=t, d=d: obs_delayed(t, d) for t, d in zip(trajectories, delays)])
    model = PWM("MultiInputPolicy", venv, **{**FAST, "learning_starts": 48}).learn(160)
    for index, trajectory in enumerate(trajectories):
        assert_replay_is_the_trajectory(model.replay_buffer, trajectory, index)


def test_image_frames_are_stored_channels_first_like_the_shown_ones():
    trajectory = Trajectory(ImageEnv())
    model = PWM("MultiInputPolicy", obs_delayed(trajectory, RandomWalkDelay(max_delay=3, p=0.5)), **FAST).learn(40)
    assert model.replay_buffer.observations[None].shape[2:] == (3, 16, 16)
    assert_replay_is_the_trajectory(model.replay_buffer, trajectory, transpose=True)


def reference_state(model, frames, actions):
    """The sequence model's state after the steps (posterior mode of frame k, action executed after it)."""
    policy, world_model = model.policy, model.policy.world_model
    state = policy.initial_state(1)
    state = {name: state[name] for name in STATE_KEYS}
    for frame, action in zip(frames, actions):
        obs = torch.as_tensor(np.asarray(frame, dtype=np.float32)[None])
        latent = world_model.sample_latent(world_model.encode(obs, batch_dims=1), deterministic=True)
        _, state = world_model.step(latent, policy.encode_action(torch.as_tensor(action)[None]), state)
    return state


def test_the_carried_state_is_the_one_before_the_shown_step_and_the_decision_is_forecast_through_every_unseen_action():
    trajectory = Trajectory(gym.make("CartPole-v1"))
    env = obs_delayed(trajectory, obs_delay=2, execution_delay=1)
    model = PWM("MultiInputPolicy", env, **{**FAST, "policy_kwargs": {**FAST["policy_kwargs"], "forecast_samples": 0}})
    policy, world_model = model.policy, model.policy.world_model
    assert policy.state_keys == STATE_KEYS + SHOWN_KEYS
    obs, _ = env.reset(seed=0)
    state = None
    for t in range(10):
        action, next_state = model.predict(obs, state, np.array([t == 0]), deterministic=True)
        shown_step, obs_delay = t - int(obs["obs_delay"]), int(obs["obs_delay"])
        assert np.array_equal(trajectory.frames[shown_step], obs["observation"])
        with torch.no_grad():
            executed = [row[1] for row in trajectory.rows]
            expected = reference_state(model, trajectory.frames[:shown_step], executed[:shown_step])
            for index, name in enumerate(STATE_KEYS):
                assert torch.allclose(torch.as_tensor(next_state[index]), expected[name], atol=1e-5), (t, name)
            shown = torch.as_tensor(obs["observation"][None])
            latent = world_model.sample_latent(world_model.encode(shown, batch_dims=1), deterministic=True)
            assert torch.allclose(torch.as_tensor(next_state[3]), latent)
            # the decision: the actor at the forecast through the obs_delay unobserved and the 1 queued actions
            pending = policy.encode_pending(torch.as_tensor(obs["pending_actions"][None]).long())
            unseen = torch.tensor([obs_delay + 1])
            ahead, ahead_state = forecast_state(world_model, latent, expected, pending, unseen, deterministic=True)
            greedy, _ = policy.actor_critic.actor.sample(world_model.features(ahead, ahead_state["readout"]), True)
            assert int(greedy) == int(action), t
        # carried: the actions executed after the shown step, the one executed now (queued) last
        assert int(next_state[5][0]) == obs_delay + 1
        carried = next_state[4][0, : obs_delay + 1].argmax(-1)
        assert carried.tolist() == obs["pending_actions"][: obs_delay + 1].tolist()
        obs, _, terminated, truncated, _ = env.step(action)
        state = next_state
        if terminated or truncated:
            break
    assert t >= 5, "enough steps to see the observation lag and catch up"


def test_steps_that_arrive_unseen_are_imagined_with_prior_samples():
    trajectory = Trajectory(gym.make("CartPole-v1"))
    env = obs_delayed(trajectory, obs_delay=Scripted([3, 3, 3, 3, 0]))
    model = PWM("MultiInputPolicy", env, **FAST)
    policy, world_model = model.policy, model.policy.world_model
    obs, _ = env.reset(seed=0)
    state = None
    for t in range(4):
        action, state = model.predict(obs, state, np.array([t == 0]), deterministic=True)
        obs, *_ = env.step(action)
    assert int(obs["obs_delay"]) == 0, "step 4 shows its own observation: steps 1-3 arrive unseen"
    torch.manual_seed(7)
    _, after = model.predict(obs, state, np.array([False]), deterministic=True)
    torch.manual_seed(7)
    with torch.no_grad():  # the definition: the posterior at step 0, then one prior sample per unseen step
        expected = {name: value for name, value in policy.initial_state(1).items() if name in STATE_KEYS}
        latent = world_model.sample_latent(world_model.encode(torch.as_tensor(trajectory.frames[0][None]), 1), True)
        for k in range(4):
            action = policy.encode_action(torch.as_tensor(trajectory.rows[k][1])[None])
            h, expected = world_model.step(latent, action, expected)
            latent = world_model.sample_latent(world_model.prior_log_probs(h))
    for index, name in enumerate(STATE_KEYS):
        assert torch.allclose(torch.as_tensor(after[index]), expected[name], atol=1e-5), name
    assert int(after[5][0]) == 1


def test_a_state_from_another_step_is_refused_naming_the_env():
    env = obs_delayed(gym.make("CartPole-v1"), obs_delay=Scripted([0, 3]))
    model = PWM("MultiInputPolicy", env, **FAST)
    obs, _ = env.reset(seed=0)
    _, state = model.predict(obs, None, np.array([True]))
    obs, *_ = env.step(0)
    obs, *_ = env.step(0)  # two steps: the obs_delay went from 0 to 2, one more than a single step can add
    with pytest.raises(ValueError, match="obs_delay 2 of env 0 .* the state does not belong"):
        model.predict(obs, state, np.array([False]))


@pytest.mark.parametrize("mode", ["forecast", "oblivious", "augmented"])
def test_every_mode_learns_saves_and_loads_under_an_observation_delay(mode, tmp_path):
    env = obs_delayed(gym.make("CartPole-v1"), execution_delay=RandomWalkDelay(max_delay=2, p=0.3))
    model = PWM("MultiInputPolicy", env, delay_mode=mode, **FAST).learn(60)
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model", device="cpu")
    assert loaded.policy.state_keys == model.policy.state_keys
    assert len(model.policy.state_keys) == (6 if mode == "forecast" else 3)
    obs, _ = env.reset(seed=1)
    state = None
    for t in range(5):
        action, state = loaded.predict(obs, state, np.array([t == 0]))
        obs, *_ = env.step(action)
