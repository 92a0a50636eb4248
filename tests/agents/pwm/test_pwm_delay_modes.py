"""PWM's delay modes: the forecast rollout, what the replay stores, save/load and bad input."""

import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env

from delayzoo.agents.pwm import PWM
from delayzoo.agents.pwm.forecast import forecast_state
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay
from tests.agents.pwm.test_pwm_agent import FAST

MODES = ("forecast", "augmented", "oblivious")


def delayed(env_id="CartPole-v1", max_delay=5, p=0.2, start=None, view=True):
    env = ExecutionDelay(gym.make(env_id), RandomWalkDelay(max_delay=max_delay, p=p, start=start))
    return PendingActionsObservation(env) if view else env


class Recorder(gym.Wrapper):
    """Records the decided actions and the executed ones (``info["executed_action"]``)."""

    def __init__(self, env):
        super().__init__(env)
        self.decided, self.executed = [], []

    def step(self, action):
        result = super().step(action)
        self.decided.append(np.asarray(action).copy())
        self.executed.append(np.asarray(result[4]["executed_action"]).copy())
        return result


def hand_made_batch(model, delays, seed=0):
    """Observations of ``len(delays)`` envs with the given delays and random pending actions."""
    rng = np.random.default_rng(seed)
    space = model.observation_space
    obs = {key: np.stack([space[key].sample() for _ in delays]) for key in ("observation", "pending_actions")}
    obs["observation"] = rng.normal(size=obs["observation"].shape).astype(np.float32)
    obs["delay"] = np.array(delays)
    for row, delay in enumerate(delays):
        obs["pending_actions"][row, delay:] = 0
    return obs


def with_forecast_samples(samples, env):
    """A fast forecast-mode PWM with ``forecast_samples=samples``."""
    policy_kwargs = {**FAST["policy_kwargs"], "forecast_samples": samples}
    return PWM("MultiInputPolicy", env, **{**FAST, "policy_kwargs": policy_kwargs})


def random_state(model, batch, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(value.shape, generator=generator)
        for name, value in model.policy.initial_state(batch).items()
    }


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_forecast_equals_a_step_by_step_prior_rollout_through_each_envs_pending_actions(env_id):
    model = PWM("MultiInputPolicy", delayed(env_id), **FAST)
    policy, world_model = model.policy, model.policy.world_model
    policy.set_training_mode(False)
    policy.forecast_samples = 0  # one forecast from the prior's modes: deterministic, checked step by step
    delays = [0, 2, 5]
    obs = hand_made_batch(model, delays)
    state = random_state(model, len(delays))
    obs_tensor, _ = policy.obs_to_tensor(obs)
    with torch.no_grad():
        latent = world_model.sample_latent(world_model.encode(obs_tensor["observation"], batch_dims=1), True)
        shape = (3, 5, *model.action_space.shape)  # Discrete: indices (3, 5); Box (1,): (3, 5, 1)
        pending = policy.encode_pending(obs_tensor["pending_actions"].reshape(shape))
        ahead, ahead_state = forecast_state(world_model, latent, state, pending, torch.tensor(delays), True)
        raw, next_state = policy.act(obs_tensor, state, torch.zeros(3, dtype=torch.bool), deterministic=True)
        for row, delay in enumerate(delays):
            z, s = latent[row : row + 1], {name: value[row : row + 1] for name, value in state.items()}
            for k in range(delay):
                h, s = world_model.step(z, pending[row : row + 1, k], s)
                z = world_model.sample_latent(world_model.prior_log_probs(h), deterministic=True)
            assert torch.allclose(ahead[row], z[0], atol=1e-5)
            for name in s:
                assert torch.allclose(ahead_state[name][row], s[name][0], atol=1e-5), name
            features = world_model.features(z, s["readout"])
            expected, encoding = policy.actor_critic.actor.sample(features, deterministic=True)
            assert torch.allclose(raw[row].float(), expected[0].float().clamp(-1, 1), atol=1e-5)
            # The recurrent state advances with the action executed now: pending action 0, or the decision at delay 0.
            executed = pending[row : row + 1, 0] if delay else encoding
            row_state = {name: value[row : row + 1] for name, value in state.items()}
            _, after = world_model.step(latent[row : row + 1], executed, row_state)
            for name in after:
                assert torch.allclose(next_state[name][row], after[name][0], atol=1e-5), name
    assert not torch.allclose(ahead[2], latent[2]), "a 5-step forecast should move the latent"


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_deterministic_forecast_acts_on_the_policy_averaged_over_sampled_forecasts(env_id):
    model = with_forecast_samples(8, delayed(env_id))
    policy, world_model, actor = model.policy, model.policy.world_model, model.policy.actor_critic.actor
    policy.set_training_mode(False)
    with torch.no_grad():  # an actor that is not uniform (its read-out starts at zero)
        generator = torch.Generator().manual_seed(0)
        for parameter in actor.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    delays = [0, 2, 5]
    obs_tensor, _ = policy.obs_to_tensor(hand_made_batch(model, delays))
    state = random_state(model, len(delays))
    with torch.no_grad():
        torch.manual_seed(4)
        raw, _ = policy.act(obs_tensor, state, torch.zeros(3, dtype=torch.bool), deterministic=True)
        latent = world_model.sample_latent(world_model.encode(obs_tensor["observation"], batch_dims=1), True)
        pending = policy.encode_pending(obs_tensor["pending_actions"].reshape(3, 5, *model.action_space.shape))
        # The definition: 8 sampled forecasts per env (rows repeated), the actor's policy averaged over them.
        torch.manual_seed(4)
        repeat = lambda x: x.repeat_interleave(8, dim=0)  # noqa: E731
        ahead, ahead_state = forecast_state(
            world_model, repeat(latent), {k: repeat(v) for k, v in state.items()}, repeat(pending),
            repeat(torch.tensor(delays)),
        )
        assert ahead.view(3, 8, -1)[2].std(0).max() > 0, "5 sampled steps: the forecasts differ"
        dist = actor.distribution(world_model.features(ahead, ahead_state["readout"]))
        plain = actor.distribution(world_model.features(latent, state["readout"]))
        if actor.discrete:
            expected = dist.probs.view(3, 8, -1).mean(1).argmax(-1)
            assert torch.equal(raw, expected)
            mean_probs = dist.probs.view(3, 8, -1).mean(1)
            assert (mean_probs.max(-1).values < 1.0).all() and mean_probs[2].std() > 0
            assert raw[0] == plain.probs[0].argmax(), "delay 0: the plain greedy action"
        else:
            expected = dist.mean.view(3, 8, -1).mean(1).clamp(-1, 1)
            assert torch.allclose(raw, expected, atol=1e-6)
            assert dist.mean.view(3, 8, -1)[2].std(0).max() > 0, "the actor's means differ between forecasts"
            assert torch.allclose(raw[0], plain.mean[0].clamp(-1, 1), atol=1e-6), "delay 0: the plain greedy action"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_forecast_samples_must_be_a_non_negative_integer(bad):
    with pytest.raises(ValueError, match="forecast_samples must be an integer >= 0, got " + re.escape(repr(bad))):
        with_forecast_samples(bad, delayed())


def test_forecast_samples_survive_save_and_load(tmp_path):
    model = with_forecast_samples(3, delayed())
    model.save(tmp_path / "model")
    assert PWM.load(tmp_path / "model", device="cpu").policy.forecast_samples == 3


def test_with_delay_zero_forecast_mode_acts_and_learns_exactly_as_plain_pwm():
    plain = PWM("MlpPolicy", gym.make("CartPole-v1"), **FAST)
    zero_delay = delayed(max_delay=3, p=0.0, start=0)  # max_delay 3 but every delay is 0
    forecast = PWM("MultiInputPolicy", zero_delay, **FAST)
    assert forecast.delay_mode == "forecast" and plain.delay_mode == "oblivious"
    for model in (plain, forecast):
        torch.manual_seed(1)  # the same stream for each model's sampled latents and actions
        model.learn(40)
    assert np.array_equal(plain.replay_buffer.actions, forecast.replay_buffer.actions)
    assert np.array_equal(plain.replay_buffer.observations[None], forecast.replay_buffer.observations[None])
    for (name, a), (_, b) in zip(plain.policy.state_dict().items(), forecast.policy.state_dict().items()):
        assert torch.equal(a, b), name
    # Sampled actions after learning, from the same random stream.
    env_plain, env_forecast = gym.make("CartPole-v1"), zero_delay
    obs_p, _ = env_plain.reset(seed=3)
    obs_f, _ = env_forecast.reset(seed=3)
    state_p = state_f = None
    for step in range(20):
        start = np.array([step == 0])
        torch.manual_seed(step)
        action_p, state_p = plain.predict(obs_p, state_p, start)
        torch.manual_seed(step)
        action_f, state_f = forecast.predict(obs_f, state_f, start)
        assert action_p == action_f
        assert all(np.array_equal(a, b) for a, b in zip(state_p, state_f))
        obs_p, _, done, *_ = env_plain.step(action_p)
        obs_f, *_ = env_forecast.step(action_f)
        if done:
            break


@pytest.mark.parametrize("mode", MODES)
def test_replay_stores_executed_actions_in_forecast_mode_and_decided_ones_otherwise(mode):
    recorder = Recorder(delayed(max_delay=3, view=False))
    env = PendingActionsObservation(recorder)
    model = PWM("MultiInputPolicy", env, delay_mode=mode, **FAST).learn(40)
    stored = model.replay_buffer.actions[:40, 0]
    decided, executed = np.array(recorder.decided), np.array(recorder.executed)
    assert not np.array_equal(decided, executed), "the delay should make them differ"
    assert np.array_equal(stored, executed if mode == "forecast" else decided)
    keys = set(model.replay_buffer.observations)
    assert keys == ({"observation", "pending_actions", "delay"} if mode == "augmented" else {None})


def test_forecast_stores_executed_box_actions_normalised_like_decided_ones():
    recorder = Recorder(delayed("Pendulum-v1", max_delay=3, view=False))
    model = PWM("MultiInputPolicy", PendingActionsObservation(recorder), **FAST).learn(40)
    executed = np.array(recorder.executed).reshape(40, 1)
    assert np.allclose(model.replay_buffer.actions[:40, 0], executed / 2.0)  # Pendulum's Box is [-2, 2]


def test_mixed_delays_in_one_vec_env_batch_learn_and_predict():
    env = make_vec_env(lambda: delayed(max_delay=4), n_envs=3, seed=0)
    model = PWM("MultiInputPolicy", env, **{**FAST, "learning_starts": 24}).learn(90)
    obs = env.reset()
    actions, _ = model.predict(obs)
    assert actions.shape == (3,) and env.action_space.contains(int(actions[0]))


@pytest.mark.parametrize("mode", MODES)
def test_save_load_keeps_delay_mode_and_acts_the_same(mode, tmp_path):
    model = PWM("MultiInputPolicy", delayed(), delay_mode=mode, **FAST).learn(30)
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model", device="cpu")
    assert loaded.delay_mode == mode and loaded.policy.delay_mode == mode
    obs = hand_made_batch(model, [0, 3, 5], seed=1)
    state = tuple(v.numpy() for v in random_state(model, 3).values())
    starts = np.zeros(3, dtype=bool)
    assert np.array_equal(model.predict(obs, state, starts, True)[0], loaded.predict(obs, state, starts, True)[0])
    for a, b in zip(model.predict(obs, state, starts, True)[1], loaded.predict(obs, state, starts, True)[1]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "env_fn, match",
    [
        (lambda: gym.make("CartPole-v1"), r"PendingActionsObservation\(ExecutionDelay\(env, delay\)\)"),
        (lambda: delayed(view=False), r"PendingActionsObservation\(ExecutionDelay\(env, delay\)\)"),
    ],
)
def test_forecast_without_the_pending_view_names_the_wrappers(env_fn, match):
    with pytest.raises(ValueError, match=match):
        PWM("MlpPolicy", env_fn(), delay_mode="forecast", **FAST)


class FakePendingView(gym.Env):
    """A Dict with the pending-view keys but no ExecutionDelay (so no executed actions)."""

    observation_space = spaces.Dict(
        {
            "observation": spaces.Box(-1, 1, (2,)),
            "pending_actions": spaces.MultiDiscrete([2, 2]),
            "delay": spaces.Discrete(3),
        }
    )
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_forecast_without_executed_actions_names_execution_delay():
    with pytest.raises(ValueError, match=r"executed_action.*ExecutionDelay"):
        PWM("MultiInputPolicy", FakePendingView(), delay_mode="forecast", **FAST)
    model = PWM("MultiInputPolicy", FakePendingView(), delay_mode="augmented", **FAST).learn(30)
    assert model.delay_mode == "augmented"


def test_unknown_delay_mode_names_the_accepted_values():
    with pytest.raises(ValueError, match=r"'forecast', 'augmented', 'oblivious'.*'predictive'"):
        PWM("MultiInputPolicy", delayed(), delay_mode="predictive", **FAST)
    with pytest.raises(TypeError, match="delay_mode is an argument of PWM"):
        policy_kwargs = {**FAST["policy_kwargs"], "delay_mode": "forecast"}
        PWM("MultiInputPolicy", delayed(), **{**FAST, "policy_kwargs": policy_kwargs})


@pytest.mark.parametrize(
    "env_id, row, value, match",
    [
        ("CartPole-v1", 1, 7, r"pending action \[?7\]? of env 1 \(position 0, delay 2\) is outside the action space "
         r"Discrete\(2\)"),
        ("Pendulum-v1", 2, 3.5, r"pending action \[3.5\] of env 2 \(position 0, delay 5\) is outside the action space "
         r"Box"),
    ],
)
def test_pending_action_outside_the_action_space_is_a_clear_error(env_id, row, value, match):
    model = PWM("MultiInputPolicy", delayed(env_id), **FAST)
    obs = hand_made_batch(model, [0, 2, 5])
    obs["pending_actions"] = obs["pending_actions"].astype(np.float32 if env_id == "Pendulum-v1" else np.int64)
    obs["pending_actions"][row, 0] = value
    with pytest.raises(ValueError, match=match):
        model.predict(obs)
    obs["pending_actions"][row, 0] = 0
    obs["delay"][0] = 6
    with pytest.raises(ValueError, match=r"delay 6 of env 0 is outside \[0, 5\]"):
        model.predict(obs)


def test_padding_beyond_each_envs_delay_is_ignored():
    model = PWM("MultiInputPolicy", delayed(), **FAST)
    obs = hand_made_batch(model, [0, 2, 5])
    obs["pending_actions"] = obs["pending_actions"].astype(np.int64)
    state = tuple(v.numpy() for v in random_state(model, 3).values())
    expected = model.predict(obs, state, np.zeros(3, dtype=bool), deterministic=True)
    obs["pending_actions"][1, 2:] = 9  # beyond delay 2: padding
    obs["pending_actions"][0, :] = 1  # delay 0: all padding
    found = model.predict(obs, state, np.zeros(3, dtype=bool), deterministic=True)
    assert np.array_equal(expected[0], found[0])
    assert all(np.array_equal(a, b) for a, b in zip(expected[1], found[1]))
