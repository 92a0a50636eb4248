import json
import pickle
import zipfile

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ, random_intensity, random_shift
from delayzoo.wrappers import ConstantDelay, ExecutionDelay, PendingActionsObservation, RandomWalkDelay

FAST = dict(learning_starts=16, batch_size=4, num_simulations=3, segment_length=8, lr_warmup_steps=10,
            reanalyze_ratio=0.5, target_update_interval=5, seed=0)


def _delayed(env, delay):
    return PendingActionsObservation(ExecutionDelay(env, delay))


def _agent(policy, env, tiny, **kwargs):
    return DelayedEZ(policy, env, policy_kwargs=dict(net_kwargs=tiny), **{**FAST, **kwargs})


@pytest.mark.parametrize(
    "policy, kind, delay",
    [("MlpPolicy", "vector", None), ("CnnPolicy", "image", None), ("MultiInputPolicy", "vector", 3),
     ("MultiInputPolicy", "image", 2)],
    ids=["vector", "image", "vector-delayed", "image-delayed"],
)
def test_smoke_learn_and_predict(policy, kind, delay, toy, tiny_mlp, tiny_conv):
    image = kind == "image"
    env = toy(kind) if delay is None else _delayed(toy(kind), RandomWalkDelay(delay))
    model = _agent(policy, env, tiny_conv if image else tiny_mlp)
    model.learn(40)
    assert model.num_timesteps == 40
    assert model._n_updates > 0 and len(model.replay_buffer) > 0
    stored = model.replay_buffer.games[0].observations
    assert stored.shape[1:] == ((3, 12, 12) if image else (4,))  # the plain observation part, channel-first
    obs, _ = env.reset(seed=3)
    action, state = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action)) and state is None
    for p in model.policy.network.parameters():
        assert torch.isfinite(p).all()


def test_oblivious_baseline_trains_under_delay(tiny_mlp, toy):
    model = _agent("MultiInputPolicy", _delayed(toy("vector"), RandomWalkDelay(3)), tiny_mlp, forward_model=False)
    model.learn(24)
    assert model._n_updates > 0 and not model.policy.forward_model
    assert any(not np.allclose(game.priorities, game.priorities[0]) for game in model.replay_buffer.games)


def test_updates_change_the_weights_and_refresh_the_target_network(tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, learning_starts=1000, target_update_interval=3)
    model.learn(30)
    before = {k: v.clone() for k, v in model.policy.network.state_dict().items()}
    model.train(2, 4)
    after = model.policy.network.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    target = model.policy.target_network.state_dict()
    assert any(not torch.equal(target[k], after[k]) for k in after)  # 2 updates: no refresh yet
    model.train(1, 4)
    for key, value in model.policy.network.state_dict().items():
        torch.testing.assert_close(model.policy.target_network.state_dict()[key], value)


def test_replay_stores_the_executed_actions(tiny_mlp, toy):
    env = _delayed(toy("vector", episode_length=10), ConstantDelay(2))
    model = _agent("MultiInputPolicy", env, tiny_mlp, learning_starts=1000, segment_length=50)
    decided = []
    act = model.policy.act

    def recording_act(*args, **kwargs):
        out = act(*args, **kwargs)
        decided.append(int(out.actions[0]))
        return out

    model.policy.act = recording_act
    model.learn(10)
    game = model.replay_buffer.games[0]
    np.testing.assert_array_equal(game.actions, [0, 0] + decided[:8])  # noop fillers, then a_{t-2}
    # the search of decision t was rooted at step t + 2
    np.testing.assert_array_equal(game.has_policy, [False, False] + [True] * 8)


def test_all_envs_act_through_one_batched_search(tiny_mlp, toy):
    venv = DummyVecEnv([lambda d=d: _delayed(toy("vector"), RandomWalkDelay(3, p=0.0, start=d)) for d in (0, 3)])
    model = _agent("MultiInputPolicy", venv, tiny_mlp, learning_starts=1000)
    sizes = []
    search = model.policy.mcts.search

    def spy(network, root_latent, *args):
        sizes.append(root_latent.shape[0])
        return search(network, root_latent, *args)

    model.policy.mcts.search = spy
    model.learn(12)
    assert model.num_timesteps == 12 and sizes == [2] * 6


def test_save_load_gives_the_same_predict_with_the_same_seed(tmp_path, tiny_mlp, toy):
    env = _delayed(toy("vector"), RandomWalkDelay(3))
    model = _agent("MultiInputPolicy", env, tiny_mlp)
    model.learn(24)
    model.save(tmp_path / "dez.zip")
    loaded = DelayedEZ.load(tmp_path / "dez.zip")
    for key, value in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[key], value)
    observations = [env.reset(seed=s)[0] for s in range(5)]
    for deterministic in (True, False):
        model.set_random_seed(7)
        loaded.set_random_seed(7)
        first = [model.predict(o, deterministic=deterministic)[0] for o in observations]
        second = [loaded.predict(o, deterministic=deterministic)[0] for o in observations]
        np.testing.assert_array_equal(first, second)
    assert loaded.num_simulations == model.num_simulations and loaded.forward_model


def test_saved_model_is_plain_data_and_loads_without_unpickling(tmp_path, tiny_mlp, toy, monkeypatch):
    kwargs = dict(net_kwargs=tiny_mlp, optimizer_class=torch.optim.Adam, optimizer_kwargs=dict(eps=1e-5))
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=kwargs, **{**FAST, "learning_starts": 8})
    model.learn(16)
    model.save(tmp_path / "dez.zip")
    with zipfile.ZipFile(tmp_path / "dez.zip") as archive:
        text = archive.read("data").decode()
    assert ":serialized:" not in text and json.loads(text)["policy_kwargs"]["optimizer_class"] == "Adam"

    def refuse(*args, **kwargs):
        raise AssertionError("loading must not unpickle")

    monkeypatch.setattr(cloudpickle, "loads", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    loaded = DelayedEZ.load(tmp_path / "dez.zip", env=toy("vector"), learning_starts=0)
    assert isinstance(loaded.policy.optimizer, torch.optim.Adam) and loaded.policy.optimizer.defaults["eps"] == 1e-5
    assert loaded.num_timesteps == 16 and loaded._n_updates == model._n_updates and loaded.learning_starts == 0
    torch.testing.assert_close(
        loaded.policy.optimizer.state_dict()["state"][0]["exp_avg"],
        model.policy.optimizer.state_dict()["state"][0]["exp_avg"],
    )
    loaded.learn(8, reset_num_timesteps=False)
    assert loaded.num_timesteps == 24 and loaded._n_updates > model._n_updates


def test_loading_refuses_pickles_and_files_of_other_formats(tmp_path):
    with zipfile.ZipFile(tmp_path / "pickled.zip", "w") as archive:
        archive.writestr("data", json.dumps({"policy_class": {":serialized:": "gAR9lC4="}}))
    with pytest.raises(ValueError, match="pickled"):
        DelayedEZ.load(tmp_path / "pickled.zip")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("data", json.dumps({"policy": "MlpPolicy"}))
    with pytest.raises(ValueError, match="not saved by DelayedEZ"):
        DelayedEZ.load(tmp_path / "other.zip")


def test_saving_refuses_an_optimizer_outside_torch_optim(tmp_path, tiny_mlp, toy):
    class MySGD(torch.optim.SGD):
        pass

    policy_kwargs = dict(net_kwargs=tiny_mlp, optimizer_class=MySGD)
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=policy_kwargs, **FAST)
    with pytest.raises(ValueError, match="torch.optim"):
        model.save(tmp_path / "dez.zip")


def test_replay_buffer_save_load_round_trip(tmp_path, tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, learning_starts=1000)
    model.learn(30)
    model.save_replay_buffer(tmp_path / "buffer.npz")
    other = _agent("MlpPolicy", toy("vector"), tiny_mlp)
    other.load_replay_buffer(tmp_path / "buffer.npz")
    assert len(other.replay_buffer) == len(model.replay_buffer) > 0
    for a, b in zip(model.replay_buffer.games, other.replay_buffer.games):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.policies, b.policies)


def test_callbacks_progress_bar_and_tensorboard(tmp_path, tiny_mlp, toy):
    class Count(BaseCallback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def _on_step(self) -> bool:
            self.steps += 1
            return self.steps < 10

    counter = Count()
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, tensorboard_log=str(tmp_path))
    model.learn(50, callback=counter, progress_bar=True, log_interval=1)
    assert counter.steps == 10 and model.num_timesteps == 10
    assert any(tmp_path.rglob("events.out.tfevents*"))


def test_training_at_batch_size_one(tiny_conv, toy):
    model = _agent("CnnPolicy", toy("image"), tiny_conv, batch_size=1)
    model.learn(20)
    assert model._n_updates > 0


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="Discrete action space"):
        DelayedEZ("MlpPolicy", gym.make("Pendulum-v1"))


def test_delay_without_the_pending_view_is_refused(toy):
    with pytest.raises(ValueError, match=r"PendingActionsObservation\(ExecutionDelay"):
        DelayedEZ("MlpPolicy", ExecutionDelay(toy("vector"), RandomWalkDelay(2)))


def test_policy_must_match_the_observations(tiny_mlp, toy):
    with pytest.raises(ValueError, match="CnnPolicy needs image"):
        _agent("CnnPolicy", toy("vector"), tiny_mlp)
    with pytest.raises(ValueError, match="MultiInputPolicy"):
        _agent("MlpPolicy", _delayed(toy("vector"), 2), tiny_mlp)


def test_random_shift_moves_images_within_the_padding():
    images = torch.zeros(64, 1, 8, 8)
    images[:, :, 4, 4] = 1.0
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    positions = {tuple(torch.nonzero(s[0]).flatten().tolist()) for s in shifted}
    assert len(positions) > 5 and all(max(abs(r - 4), abs(c - 4)) <= 2 for r, c in positions)


def test_random_intensity_scales_each_image_within_ten_percent():
    images = torch.ones(500, 3, 4, 4)
    out = random_intensity(images, 0.05, torch.Generator().manual_seed(0))
    factors = out[:, 0, 0, 0]
    assert (out == factors.view(-1, 1, 1, 1)).all()  # one factor per image
    assert factors.min() >= 0.9 and factors.max() <= 1.1 and factors.std() > 0.02


def test_replay_buffer_of_another_env_is_refused(tmp_path, tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, learning_starts=1000)
    model.learn(30)
    model.save_replay_buffer(tmp_path / "buffer.npz")
    other = _agent("MlpPolicy", gym.make("Acrobot-v1"), tiny_mlp)  # 6 entries, 3 actions
    with pytest.raises(ValueError, match=r"game 0 observations has shape \(\d+, 4\), expected \(\d+, 6\)"):
        other.load_replay_buffer(tmp_path / "buffer.npz")
    with np.load(tmp_path / "buffer.npz") as data:
        arrays = {key: data[key] for key in data.files}
    arrays["game0/actions"] = arrays["game0/actions"] + 7
    np.savez(tmp_path / "crafted.npz", **arrays)
    with pytest.raises(ValueError, match="game 0 has actions outside Discrete"):
        model.load_replay_buffer(tmp_path / "crafted.npz")
    arrays["game0/actions"] = arrays["game0/actions"] - 7
    np.savez(tmp_path / "crafted.npz", **{**arrays, "total_added": np.asarray(1)})
    with pytest.raises(ValueError, match="total_added=1 is below"):
        model.load_replay_buffer(tmp_path / "crafted.npz")
