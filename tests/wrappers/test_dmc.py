"""make_dmc: proprio and headless pixel observations, action repeat, delays, env checkers."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from delayzoo.wrappers.delay import ExecutionDelay
from delayzoo.wrappers.dmc import make_dmc
from delayzoo.wrappers.pending import find_execution_delay


def test_pixels_render_headless_with_egl_when_no_gl_backend_is_set():
    environ = {key: value for key, value in os.environ.items() if key not in ("MUJOCO_GL", "DISPLAY")}
    code = (
        "import os; from delayzoo.wrappers.dmc import make_dmc; "
        "obs, _ = make_dmc(obs='pixels').reset(seed=0); print(os.environ['MUJOCO_GL'], obs.shape, obs.std() > 10)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[-2] == "egl (64, 64, 3) True"


def test_proprio_is_a_flat_float32_vector_with_finite_values_over_a_whole_episode():
    env = make_dmc("cartpole-swingup")
    assert env.observation_space == spaces.Box(-np.inf, np.inf, (5,), np.float32)
    assert env.action_space == spaces.Box(-1.0, 1.0, (1,), np.float32)
    obs, _ = env.reset(seed=0)
    steps, returns = 0, 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.dtype == np.float32 and obs.shape == (5,) and np.all(np.isfinite(obs))
        steps += 1
        returns += reward
        if terminated or truncated:
            break
    assert truncated and not terminated
    assert steps == 500  # 1000 simulator steps at action repeat 2
    assert info["episode"]["l"] == 500 and info["episode"]["r"] == pytest.approx(returns)


def test_action_repeat_sums_the_rewards_of_the_repeated_steps():
    import shimmy  # noqa: F401

    env = make_dmc("cartpole-swingup", action_repeat=3)
    raw = gym.make("dm_control/cartpole-swingup-v0")
    obs, _ = env.reset(seed=1)
    raw_obs, _ = raw.reset(seed=1)
    np.testing.assert_allclose(obs, np.concatenate([raw_obs["position"], raw_obs["velocity"]]), rtol=1e-6)
    for action in np.linspace(-1, 1, 7, dtype=np.float32).reshape(-1, 1):
        obs, reward, *_ = env.step(action)
        raw_steps = [raw.step(action) for _ in range(3)]
        assert reward == pytest.approx(sum(step[1] for step in raw_steps))
        raw_obs = raw_steps[-1][0]
        np.testing.assert_allclose(obs, np.concatenate([raw_obs["position"], raw_obs["velocity"]]), rtol=1e-6)


def test_pixels_are_64px_uint8_images_that_show_the_motion():
    env = make_dmc("cartpole-swingup", obs="pixels", size=64)
    assert env.observation_space == spaces.Box(0, 255, (64, 64, 3), np.uint8)
    first, _ = env.reset(seed=0)
    assert first.shape == (64, 64, 3) and first.dtype == np.uint8
    assert first.std() > 10  # a rendered scene, not a blank buffer
    obs = first
    for _ in range(8):
        obs, *_ = env.step(np.ones(1, np.float32))
    assert env.observation_space.contains(obs)
    assert np.abs(obs.astype(int) - first.astype(int)).mean() > 0.5  # the cart moved


def test_pixels_use_camera_0_by_default_and_camera_2_for_quadruped():
    assert make_dmc("cartpole-swingup", obs="pixels").unwrapped.render_kwargs["camera_id"] == 0
    assert make_dmc("quadruped-walk", obs="pixels").unwrapped.render_kwargs["camera_id"] == 2
    assert make_dmc("cartpole-swingup", obs="pixels", camera_id=1).unwrapped.render_kwargs["camera_id"] == 1


def test_delay_and_pending_view_wrap_the_continuous_env():
    env = make_dmc("cartpole-swingup", delay=2, pending_view=True)
    assert isinstance(find_execution_delay(env), ExecutionDelay)
    assert env.observation_space["pending_actions"].shape == (2,)
    obs, info = env.reset(seed=0)
    assert obs["delay"] == 2
    executed = [env.step(np.array([a], np.float32))[4]["executed_action"] for a in (0.5, -0.5, 1.0)]
    np.testing.assert_array_equal(np.concatenate(executed), [0.0, 0.0, 0.5])


@pytest.mark.parametrize(
    "options",
    [{}, {"obs": "pixels"}, {"delay": 2, "pending_view": True}],
    ids=["proprio", "pixels", "proprio-delay-pending"],
)
def test_gymnasium_and_sb3_env_checkers_pass(options):
    # skip_render_check: Gymnasium would re-make the env in "human" mode, which needs a display
    gym_check_env(make_dmc("cartpole-swingup", **options), skip_render_check=True)
    sb3_check_env(make_dmc("cartpole-swingup", **options))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"obs": "rgb"}, ValueError, "rgb"),
        ({"task": "cartpole-juggle"}, ValueError, "cartpole-juggle"),
        ({"action_repeat": 0}, ValueError, "action_repeat"),
        ({"size": -8, "obs": "pixels"}, ValueError, "size"),
        ({"size": 64.0, "obs": "pixels"}, TypeError, "size"),
        ({"camera_id": -1, "obs": "pixels"}, ValueError, "camera_id"),
        ({"pending_view": True}, ValueError, "pending_view"),
        ({"delay": 1.5}, TypeError, "1.5"),
    ],
)
def test_bad_options_raise_naming_the_value(options, error, match):
    with pytest.raises(error, match=match):
        make_dmc(**options)


def test_a_camera_the_model_lacks_fails_on_reset_naming_it():
    env = make_dmc("cartpole-swingup", obs="pixels", camera_id=7)
    with pytest.raises(ValueError, match="camera_id=7"):
        env.reset(seed=0)
