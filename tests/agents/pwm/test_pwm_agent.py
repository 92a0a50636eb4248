
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger

from delayzoo.agents.pwm import PWM

TINY = dict(
    world_model_kwargs=dict(
        stoch=4,
        classes=4,
        cnn_channels=(4, 8),
        mlp_units=16,
        mlp_layers=1,
        seq_width=16,
        seq_cells=1,
        seq_divisor=2,
        reward_bins=21,
    ),
    actor_critic_kwargs=dict(units=16, layers=1, value_bins=21),
)
FAST = dict(
    buffer_size=400,
    learning_starts=24,
    batch_size=3,
    sequence_length=8,
    imagination_horizon=3,
    policy_kwargs=TINY,
    seed=0,
    device="cpu",
)


class ImageEnv(gym.Env):
    """A 16x16 RGB frame showing the step count; reward for matching the step's parity; 12 steps."""

    def __init__(self, continuous: bool = False, lives: bool = False):
        self.observation_space = spaces.Box(0, 255, (16, 16, 3), np.uint8)
        self.action_space = spaces.Box(-1, 2, (2,), np.float32) if continuous else spaces.Discrete(3)
        self.lives = lives

    def _obs(self):
        return np.full((16, 16, 3), 20 * self.t, dtype=np.uint8)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        target = self.t % 2
        chosen = int(np.asarray(action).ravel()[0] > 0.5) if isinstance(self.action_space, spaces.Box) else int(action)
        self.t += 1
        info = {"life_loss": self.lives and self.t % 5 == 0}
        return self._obs(), float(chosen == target), self.t >= 12, False, info


class Recorder(KVWriter):
    def __init__(self):
        self.records = []

    def write(self, key_values, key_excluded, step=0):
        self.records.append(dict(key_values))


def logged_keys(model):
    recorder = Recorder()
    model.set_logger(Logger(folder=None, output_formats=[recorder]))
    return recorder


@pytest.mark.parametrize(
    "policy, env_fn",
    [
        ("MlpPolicy", lambda: gym.make("CartPole-v1")),
        ("MlpPolicy", lambda: gym.make("Pendulum-v1")),
        ("CnnPolicy", lambda: ImageEnv()),
        ("CnnPolicy", lambda: ImageEnv(continuous=True)),
    ],
    ids=["discrete-vector", "box-vector", "discrete-image", "box-image"],
)
def test_smoke_learn_logs_and_predicts_within_the_action_space(policy, env_fn):
    model = PWM(policy, env_fn(), **FAST)
    recorder = logged_keys(model)
    model.learn(40, log_interval=1)
    assert model.num_timesteps == 40 and model._n_updates > 0
    model.dump_logs()  # SB3 dumps at episode ends only; Pendulum has none within 40 steps
    keys = set().union(*recorder.records)
    assert {
        "time/fps",
        "train/world_model_loss",
        "train/actor_loss",
        "train/critic_loss",
        "train/reconstruction_loss",
        "train/dynamics_loss",
    } <= keys
    if policy == "CnnPolicy":  # 12-step episodes
        assert "rollout/ep_rew_mean" in recorder.records[0]
    env = env_fn()
    obs, _ = env.reset(seed=1)
    state, start = None, np.array([True])
    for _ in range(5):
        action, state = model.predict(obs, state=state, episode_start=start)
        assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype))
        obs, _, terminated, truncated, _ = env.step(action)
        start = np.array([terminated or truncated])


def test_save_load_round_trip_gives_the_same_predictions(tmp_path):
    model = PWM("CnnPolicy", ImageEnv(), **FAST).learn(40)
    model.save(tmp_path / "pwm")
    loaded = PWM.load(tmp_path / "pwm", env=ImageEnv(), device="cpu")
    assert loaded.sequence_length == 8 and loaded.imagination_horizon == 3
    for name, tensor in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[name], tensor)
    obs, _ = ImageEnv().reset()
    state_a = state_b = None
    for _ in range(3):
        action_a, state_a = model.predict(obs, state=state_a, deterministic=True)
        action_b, state_b = loaded.predict(obs, state=state_b, deterministic=True)
        assert action_a == action_b
        for a, b in zip(state_a, state_b):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    loaded.learn(10, reset_num_timesteps=False)  # optimisers restored, training continues


def test_load_refuses_a_mismatched_env(tmp_path):
    model = PWM("MlpPolicy", "CartPole-v1", **FAST)
    model.save(tmp_path / "pwm")
    with pytest.raises(ValueError, match="spaces do not match"):
        PWM.load(tmp_path / "pwm", env=gym.make("Acrobot-v1"))


def test_replay_buffer_save_load_continues_learning(tmp_path):
    model = PWM("MlpPolicy", "CartPole-v1", **FAST).learn(30)
    model.save(tmp_path / "pwm")
    model.save_replay_buffer(tmp_path / "buffer.npz")

    without_buffer = PWM.load(tmp_path / "pwm", env=gym.make("CartPole-v1"))
    updates = without_buffer._n_updates
    without_buffer.learn(5, reset_num_timesteps=False)
    assert without_buffer._n_updates == updates  # waits for one window of fresh data

    loaded = PWM.load(tmp_path / "pwm", env=gym.make("CartPole-v1"))
    loaded.load_replay_buffer(tmp_path / "buffer.npz")
    assert loaded.replay_buffer.pos == 30
    np.testing.assert_array_equal(loaded.replay_buffer.observations[None], model.replay_buffer.observations[None])
    loaded.learn(5, reset_num_timesteps=False)
    assert loaded._n_updates == updates + 5
    assert loaded.replay_buffer.is_first[30, 0]  # the live env does not continue the saved episode


def test_life_loss_is_a_terminal_for_learning_but_not_for_scores():
    model = PWM("CnnPolicy", ImageEnv(lives=True), **FAST).learn(24)
    terminals = model.replay_buffer.terminals[:24, 0]
    is_first = model.replay_buffer.is_first[:24, 0]
    np.testing.assert_array_equal(np.flatnonzero(terminals), [4, 9, 11, 16, 21, 23])
    np.testing.assert_array_equal(np.flatnonzero(is_first), [0, 5, 10, 12, 17, 22])
    assert [info["l"] for info in model.ep_info_buffer] == [12, 12]


def test_multiple_envs_and_progress_bar():
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PWM("MlpPolicy", env, **{**FAST, "learning_starts": 16, "sequence_length": 6})
    model.learn(40, progress_bar=True)
    assert model.replay_buffer.stored_steps() == 20 and model._n_updates > 0


@pytest.mark.parametrize(
    "env, kwargs, match",
    [
        (ImageEnv(), dict(sequence_length=500), "sequence_length=500"),
        (ImageEnv(), dict(learning_starts=5), "learning_starts=5"),
    ],
)
def test_bad_sizes_raise_clear_errors(env, kwargs, match):
    with pytest.raises(ValueError, match=match):
        PWM("CnnPolicy", env, **{**FAST, **kwargs})


class SpaceEnv(gym.Env):
    def __init__(self, observation_space, action_space, reward=0.0):
        self.observation_space, self.action_space, self.reward = observation_space, action_space, reward

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), self.reward, False, False, {}


@pytest.mark.parametrize(
    "observation_space, action_space, match",
    [
        (spaces.MultiBinary(3), spaces.Discrete(2), "MultiBinary"),
        (spaces.Box(-1, 1, (3,)), spaces.MultiBinary(2), "MultiBinary"),
        (spaces.Box(-1, 1, (3,)), spaces.Box(-np.inf, np.inf, (2,)), "bounded"),
        (spaces.Dict({"text": spaces.Text(5)}), spaces.Discrete(2), "Text"),
    ],
)
def test_unsupported_spaces_fail_at_construction_naming_the_space(observation_space, action_space, match):
    with pytest.raises(ValueError, match=match):
        PWM("MultiInputPolicy", SpaceEnv(observation_space, action_space), **FAST)


def test_non_finite_rewards_raise():
    model = PWM("MlpPolicy", SpaceEnv(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), reward=float("inf")), **FAST)
    with pytest.raises(ValueError, match="finite"):
        model.learn(5)


def test_saved_model_is_plain_data_and_loads_without_env(tmp_path):
    import zipfile

    model = PWM("MlpPolicy", "Pendulum-v1", **FAST)
    model.save(tmp_path / "pwm.zip")
    with zipfile.ZipFile(tmp_path / "pwm.zip") as archive:
        assert ":serialized:" not in archive.read("data").decode()
    loaded = PWM.load(tmp_path / "pwm.zip", custom_objects={"learning_rate": 5e-4, "lr_schedule": None}, seed=3)
    assert loaded.learning_rate == 5e-4 and loaded.seed == 3
    assert loaded.observation_space == model.observation_space and loaded.action_space == model.action_space
    obs = np.array([1.0, 0.0, 0.5], dtype=np.float32)
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def test_load_refuses_models_of_other_algorithms(tmp_path):
    from stable_baselines3 import DQN

    DQN("MlpPolicy", "CartPole-v1", learning_starts=0, buffer_size=10).save(tmp_path / "dqn")
    with pytest.raises(ValueError, match="pickled"):
        PWM.load(tmp_path / "dqn")


def test_unknown_size_keywords_are_named():
    with pytest.raises(TypeError, match="seq_depth"):
        PWM("MlpPolicy", "CartPole-v1", **{**FAST, "policy_kwargs": {"world_model_kwargs": {"seq_depth": 3}}})


@pytest.mark.parametrize(
    "policy_kwargs, error, match",
    [
        ({"world_model_kwarg": {}}, TypeError, r"'world_model_kwarg'.*accepted keys.*world_model_kwargs"),
        ({"world_model_kwargs": {"seq_heads": 4}}, TypeError, r"'seq_heads'.*accepted keys.*seq_divisor"),
        ({"actor_critic_kwargs": {"unit": 4}}, TypeError, r"'unit'.*accepted keys.*units"),
        ({"world_model_kwargs": {"norm": "layer"}}, ValueError, r"'layer'.*'batch', 'group'"),
        ({"world_model_kwargs": {"seq_width": 16, "seq_divisor": 3}}, ValueError, "seq_divisor=3"),
        ({"scan_method": "fast"}, ValueError, r"'fast'.*'auto', 'parallel', 'sequential'"),
    ],
)
def test_unknown_policy_keys_and_options_fail_at_construction_naming_them(policy_kwargs, error, match):
    kwargs = {**TINY, **policy_kwargs}
    if "world_model_kwargs" in policy_kwargs and "norm" not in policy_kwargs["world_model_kwargs"]:
        kwargs["world_model_kwargs"] = {**TINY["world_model_kwargs"], **policy_kwargs["world_model_kwargs"]}
    with pytest.raises(error, match=match):
        PWM("MlpPolicy", "CartPole-v1", **{**FAST, "policy_kwargs": kwargs})


def test_batch_norm_with_one_sample_per_training_batch_is_a_clear_error():
    one_sample = {**FAST, "batch_size": 1, "sequence_length": 2, "learning_starts": 24}
    with pytest.raises(ValueError, match="norm='batch' needs at least 2 samples.*norm='group'"):
        PWM("MlpPolicy", "CartPole-v1", **one_sample)
    group = {**TINY, "world_model_kwargs": {**TINY["world_model_kwargs"], "norm": "group"}}
    model = PWM("MlpPolicy", "CartPole-v1", **{**one_sample, "policy_kwargs": group}).learn(30)
    assert model._n_updates > 0
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())


class BigImageEnv(ImageEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(0, 255, (100, 100, 3), np.uint8)

    def _obs(self):
        return np.full((100, 100, 3), 20 * self.t, dtype=np.uint8)


def test_images_larger_than_96_pixels_point_to_the_atari_factory():
    with pytest.warns(UserWarning, match=r"100x100 images.*make_atari"):
        PWM("CnnPolicy", BigImageEnv(), **FAST)


def test_replay_buffer_warns_when_it_will_not_fit_in_memory(monkeypatch):
    from delayzoo.agents.pwm import buffers

    class Memory:
        available = 10_000

    monkeypatch.setattr(buffers.psutil, "virtual_memory", lambda: Memory())
    with pytest.warns(UserWarning, match=r"enough memory to store the complete replay buffer: 0\.\d+ GB > 0\.00 GB"):
        PWM("CnnPolicy", ImageEnv(), **FAST)


def test_mixed_precision_trains_and_keeps_float32_weights_and_memories(tmp_path):
    model = PWM("CnnPolicy", ImageEnv(), **{**FAST, "policy_kwargs": {**TINY, "mixed_precision": True}})
    model.learn(40)
    assert model._n_updates > 0
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.policy.parameters())
    _, state = model.predict(ImageEnv().reset()[0])
    assert state[0].dtype == np.float32
    model.save(tmp_path / "pwm")
    assert PWM.load(tmp_path / "pwm", env=ImageEnv()).policy.mixed_precision



@pytest.mark.filterwarnings("ignore:learning_starts")
def test_short_softmax_loss_and_gradients_match_the_last_dim_softmax(monkeypatch):
    """The small model's latents (8 classes) take their softmax along a leading dim (faster on CPU):
    the world-model loss, its gradients and the imagined rollout of the benchmark's model size are
    those of torch's last-dim softmax, up to float rounding."""
    import delayzoo.agents.pwm.world_model as world_model

    policy_kwargs = dict(
        world_model_kwargs=dict(stoch=8, classes=8, mlp_units=64, seq_width=64, seq_cells=1, seq_divisor=2),
        actor_critic_kwargs=dict(units=64),
    )
    model = PWM(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=64,
        batch_size=4,
        sequence_length=16,
        policy_kwargs=policy_kwargs,
        seed=0,
        device="cpu",
    )
    model.learn(64)  # random steps only
    batch = model.replay_buffer.sample(4, 16, np.random.default_rng(0))
    policy = model.policy

    def run(softmax):
        monkeypatch.setattr(world_model, "short_softmax", softmax)
        torch.manual_seed(1)
        policy.world_model.zero_grad()
        loss, _, starts = policy.world_model.loss(
            batch.observations.transpose(0, 1),
            policy.encode_action(batch.actions.transpose(0, 1)),
            batch.rewards.transpose(0, 1),
            batch.terminals.transpose(0, 1).float(),
            batch.is_first.transpose(0, 1),
        )
        loss.backward()
        grads = [p.grad.clone() for p in policy.world_model.parameters() if p.grad is not None]
        state = {name: value.flatten(0, 1).clone() for name, value in starts["state"].items()}
        rollout = policy.actor_critic.imagine(policy.world_model, starts["latent"].flatten(0, 1), state, 15)
        return loss.detach(), grads, rollout

    fast = run(world_model.short_softmax)
    plain = run(lambda logits: torch.softmax(logits, dim=-1))
    torch.testing.assert_close(fast[0], plain[0], rtol=1e-5, atol=1e-6)
    assert len(fast[1]) == len(plain[1]) > 0
    for fast_grad, plain_grad in zip(fast[1], plain[1]):
        torch.testing.assert_close(fast_grad, plain_grad, rtol=1e-3, atol=1e-6)
    for name in ("features", "raw_actions", "rewards", "continues"):
        torch.testing.assert_close(getattr(fast[2], name), getattr(plain[2], name), rtol=1e-4, atol=1e-5, msg=name)


def test_predict_puts_every_module_in_eval_mode_even_when_one_was_left_training():
    model = PWM("MlpPolicy", "CartPole-v1", **FAST)
    model.policy.set_training_mode(False)
    model.policy.world_model.sequence.layers[0].train()  # a stray module in training mode
    model.predict(np.zeros(4, dtype=np.float32))
    assert not any(module.training for module in model.policy.modules())
    model.policy.set_training_mode(True)
    assert all(module.training for module in model.policy.modules())
