import json
import pickle
import zipfile

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.losses import random_intensity, random_shift
from delayzoo.agents.delayed_ez.update import learning_rate
from delayzoo.wrappers import ConstantDelay, ExecutionDelay, PendingActionsObservation, RandomWalkDelay
from delayzoo.wrappers.atari import FrameStack

FAST = dict(learning_starts=16, batch_size=4, num_simulations=3, replay_buffer_kwargs=dict(segment_length=8),
            lr_warmup_steps=10,
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
    stored = model.replay_buffer.segments()[0].observations
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
    priorities = model.replay_buffer.priorities()
    assert not np.allclose(priorities, priorities[0])


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


@pytest.mark.parametrize("forward_model", [True, False], ids=["forward-stores-executed", "oblivious-stores-decided"])
def test_replay_stores_executed_actions_with_the_forward_model_and_decided_ones_without(tiny_mlp, toy, forward_model):
    env = _delayed(toy("vector", episode_length=10), ConstantDelay(2))
    model = _agent(
        "MultiInputPolicy", env, tiny_mlp, learning_starts=1000, replay_buffer_kwargs=dict(segment_length=50),
        forward_model=forward_model,
    )
    assert model.replay_actions == ("executed" if forward_model else "decided")
    decided = []
    act = model.policy.act

    def recording_act(*args, **kwargs):
        out = act(*args, **kwargs)
        decided.append(int(out.actions[0]))
        return out

    model.policy.act = recording_act
    model.learn(10)
    game = model.replay_buffer.segments()[0]
    if forward_model:
        np.testing.assert_array_equal(game.actions, [0, 0] + decided[:8])  # noop fillers, then a_{t-2}
        # the search of decision t was rooted at step t + 2
        np.testing.assert_array_equal(game.has_policy, [False, False] + [True] * 8)
    else:
        np.testing.assert_array_equal(game.actions, decided)  # the paper's Oblivious-EZ
        np.testing.assert_array_equal(game.has_policy, [True] * 10)  # rooted at the current observation


def test_forecast_searches_can_be_left_out_of_the_policy_targets(tiny_mlp, toy):
    env = _delayed(toy("vector", episode_length=10), ConstantDelay(2))
    model = _agent("MultiInputPolicy", env, tiny_mlp, learning_starts=1000,
                   replay_buffer_kwargs=dict(segment_length=50),
                   forecast_policy="reanalyse")
    model.learn(10)
    # every search was rooted at a forecast: its visits only picked the action
    np.testing.assert_array_equal(model.replay_buffer.segments()[0].has_policy, [False] * 10)


def test_without_delay_both_forecast_policies_train_the_same(tiny_mlp, toy):
    models = [_agent("MlpPolicy", toy("vector"), tiny_mlp, forecast_policy=value) for value in ("reanalyse", "store")]
    for model in models:
        model.learn(40)
    assert models[0]._n_updates > 0
    for name, value in models[0].policy.network.state_dict().items():
        assert torch.equal(models[1].policy.network.state_dict()[name], value), name


def test_unknown_forecast_policy_is_named(tiny_mlp, toy):
    with pytest.raises(ValueError, match="forecast_policy.*'keep'"):
        _agent("MultiInputPolicy", _delayed(toy("vector"), 2), tiny_mlp, forecast_policy="keep")


def test_executed_actions_can_train_the_oblivious_baseline(tiny_mlp, toy):
    model = _agent("MultiInputPolicy", _delayed(toy("vector"), ConstantDelay(2)), tiny_mlp, forward_model=False,
                   replay_actions="executed", learning_starts=1000, replay_buffer_kwargs=dict(segment_length=50))
    model.learn(15)
    np.testing.assert_array_equal(model.replay_buffer.segments()[0].actions[:2], [0, 0])


def test_rewards_are_clipped_for_learning_but_scores_stay_raw(tiny_mlp, toy):
    class Scaled(gym.RewardWrapper):
        def reward(self, reward):
            return 7.0 * reward - 2.0

    model = _agent(
        "MlpPolicy", Scaled(toy("vector", episode_length=6)), tiny_mlp, clip_reward=True, learning_starts=1000
    )
    model.learn(12)
    stored = np.concatenate([game.rewards for game in model.replay_buffer.segments()])
    assert set(stored) <= {-1.0, 1.0} and len(stored) == 12
    scores = [info["r"] for info in model.ep_info_buffer]
    assert len(scores) == 2 and sum(scores) == pytest.approx(sum(5.0 if r > 0 else -2.0 for r in stored))
    bounded = _agent(
        "MlpPolicy", Scaled(toy("vector", episode_length=6)), tiny_mlp, clip_reward=3, learning_starts=1000
    )
    bounded.learn(12)
    assert set(np.concatenate([g.rewards for g in bounded.replay_buffer.segments()])) <= {-2.0, 3.0}


def test_learning_rate_warms_up_then_decays_stepwise():
    rates = {n: learning_rate(0.2, n, warmup_steps=10, decay_steps=100, decay_rate=0.1)
             for n in (0, 4, 9, 10, 109, 110, 210)}
    assert rates[0] == pytest.approx(0.02) and rates[4] == pytest.approx(0.1) and rates[9] == pytest.approx(0.2)
    assert rates[10] == rates[109] == pytest.approx(0.2)
    assert rates[110] == pytest.approx(0.02) and rates[210] == pytest.approx(0.002)


def test_final_updates_run_after_the_last_env_step(tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, final_updates=5)
    model.learn(24)
    assert model.num_timesteps == 24 and model._n_updates == (24 - 16) + 5


def test_final_updates_follow_the_run_none_when_it_makes_no_update(tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, learning_starts=1000, final_updates=5)
    with pytest.warns(UserWarning, match="makes no update"):
        model.learn(24)
    assert model.num_timesteps == 24 and model._n_updates == 0 and len(model.replay_buffer) > 0


def test_the_run_time_projection_counts_the_final_updates(tiny_mlp, toy, capsys):
    model = _agent("MlpPolicy", toy("vector"), tiny_mlp, final_updates=30, verbose=1)
    model.learn(24)
    line = next(line for line in capsys.readouterr().out.splitlines() if "one update took" in line)
    assert "about 37 more for the requested 24 steps (30 of them after the last step): " in line


def test_frame_stack_is_read_from_the_env_and_frames_are_stored_once(tiny_conv, toy):
    model = _agent("CnnPolicy", FrameStack(toy("image"), 3), tiny_conv, learning_starts=1000)
    assert model.frame_stack == 3 and model.observation_space.shape == (9, 12, 12)
    model.learn(15)
    assert model.replay_buffer.frame_shape == (3, 12, 12)
    game = model.replay_buffer.segments()[0]
    assert len(game.frames) == len(game) + 3


def test_all_envs_act_through_one_batched_search(tiny_mlp, toy):
    venv = DummyVecEnv([lambda d=d: _delayed(toy("vector"), RandomWalkDelay(3, p=0.0, start=d)) for d in (0, 3)])
    model = _agent("MultiInputPolicy", venv, tiny_mlp, learning_starts=1000)
    sizes = []
    search = model.policy.mcts.search

    def spy(network, root_latent, *args, **kwargs):
        sizes.append(root_latent.shape[0])
        return search(network, root_latent, *args, **kwargs)

    model.policy.mcts.search = spy
    model.learn(12)
    assert model.num_timesteps == 12 and sizes == [2] * 6


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


def test_training_at_batch_size_one(tiny_conv, toy):
    model = _agent("CnnPolicy", toy("image"), tiny_conv, batch_size=1)
    model.learn(20)
    assert model._n_updates > 0


@pytest.mark.parametrize(
    "space, match",
    [(gym.spaces.Box(-1, 1, (2,)), "Box"), (gym.spaces.MultiDiscrete([2, 3]), "MultiDiscrete")],
    ids=["box", "multidiscrete"],
)
def test_non_discrete_action_spaces_are_refused_naming_the_space(space, match, toy):
    env = toy("vector")
    env.action_space = space
    with pytest.raises(ValueError, match=match):
        DelayedEZ("MlpPolicy", env)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(frame_stack=0), ValueError, "frame_stack"),
        (dict(frame_stack=2.0), TypeError, "frame_stack"),
        (dict(frame_stack=2), ValueError, "frame_stack=2"),  # the env does not stack frames that way
        (dict(replay_actions="intended"), ValueError, "'intended'"),
        (dict(clip_reward="sign"), TypeError, "'sign'"),
        (dict(clip_reward=-1.0), ValueError, "-1.0"),
        (dict(num_simulations=0), ValueError, "num_simulations"),
        (dict(reanalyze_ratio=1.5), ValueError, "reanalyze_ratio"),
        (dict(lr_decay_steps=0), ValueError, "lr_decay_steps"),
    ],
)
def test_bad_arguments_raise_naming_the_value(kwargs, error, match, tiny_conv, toy):
    with pytest.raises(error, match=match):
        _agent("CnnPolicy", FrameStack(toy("image"), 3), tiny_conv, **kwargs)


def test_delay_without_the_pending_view_is_refused(toy):
    with pytest.raises(ValueError, match=r"PendingActionsObservation\(ExecutionDelay"):
        DelayedEZ("MlpPolicy", ExecutionDelay(toy("vector"), RandomWalkDelay(2)))


def test_policy_must_match_the_observations(tiny_mlp, toy):
    with pytest.raises(ValueError, match="CnnPolicy needs image"):
        _agent("CnnPolicy", toy("vector"), tiny_mlp)
    with pytest.raises(ValueError, match="MultiInputPolicy"):
        _agent("MlpPolicy", _delayed(toy("vector"), 2), tiny_mlp)


@pytest.mark.parametrize("size, augment, warns", [(12, True, True), (12, False, False), (48, True, False)])
def test_augment_warns_when_its_shift_is_large_for_the_frames(size, augment, warns, tiny_conv, toy, recwarn):
    _agent("CnnPolicy", toy("image", size=size), tiny_conv, augment=augment)
    messages = [str(w.message) for w in recwarn if "augment=True" in str(w.message)]
    assert len(messages) == int(warns)
    if warns:
        assert "12-pixel frames by up to 4 pixels" in messages[0] and "augment=False" in messages[0]


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


def test_prefetching_the_next_round_in_a_thread_stays_reproducible(tiny_mlp, toy):
    runs = []
    for _ in range(2):
        model = _agent("MlpPolicy", toy("vector"), tiny_mlp, gradient_steps=2, prefetch=True)
        model.learn(30)
        assert model._round_targets.pending is None  # no thread outlives learn
        runs.append(model.policy.network.state_dict())
    for key, value in runs[0].items():
        torch.testing.assert_close(runs[1][key], value)
    model.train(2, 4)
    assert model._round_targets.pending is not None and len(model._round_targets.pending.batches) == 2
    model.train(2, 4)  # uses the prefetched batches
    assert model._n_updates == 2 * (30 - 16) + 4


def test_saved_replay_buffer_keeps_the_running_episodes_and_loading_checks_the_shapes(
    tmp_path, tiny_mlp, tiny_conv, toy
):
    model = _agent("MlpPolicy", toy("vector", episode_length=50), tiny_mlp, learning_starts=1000,
                   replay_buffer_kwargs=dict(segment_length=40))
    model.learn(10)
    assert len(model.replay_buffer) == 0  # no segment finished yet
    model.save_replay_buffer(tmp_path / "buffer.npz")
    other = _agent("MlpPolicy", toy("vector"), tiny_mlp)
    other.load_replay_buffer(tmp_path / "buffer.npz")
    assert len(other.replay_buffer) == 10 and not other.replay_buffer.segments()[0].terminated
    images = _agent("CnnPolicy", toy("image"), tiny_conv)
    with pytest.raises(ValueError, match=r"shape \(4,\), the model takes \(3, 12, 12\)"):
        images.load_replay_buffer(tmp_path / "buffer.npz")


def test_a_saved_buffer_whose_lengths_claim_more_than_its_arrays_hold_is_refused(tmp_path, tiny_mlp, toy):
    model = _agent("MlpPolicy", toy("vector", episode_length=6), tiny_mlp, learning_starts=1000,
                   replay_buffer_kwargs=dict(segment_length=4))
    model.learn(20)
    model.save_replay_buffer(tmp_path / "buffer.npz")
    with np.load(tmp_path / "buffer.npz") as data:
        arrays = {name: data[name] for name in data.files}
    arrays["lengths"][-1] += 3  # numpy slicing would silently cut the last segment short
    np.savez(tmp_path / "crafted.npz", **arrays)
    other = _agent("MlpPolicy", toy("vector"), tiny_mlp)
    buffer = other.replay_buffer
    with pytest.raises(ValueError, match=r"crafted.npz: its lengths claim \d+ transitions in \d+ segments") as error:
        other.load_replay_buffer(tmp_path / "crafted.npz")
    assert str(tmp_path / "crafted.npz") in str(error.value)
    assert other.replay_buffer is buffer and len(buffer) == 0


@pytest.mark.parametrize(
    "optimizer_class, optimizer_kwargs, foreach",
    [(torch.optim.SGD, None, True), (torch.optim.Adam, dict(weight_decay=1e-4), True),
     (torch.optim.Adam, dict(foreach=False), False), (torch.optim.Adam, dict(fused=True), None)],
)
def test_optimiser_updates_all_parameters_at_once_unless_told_otherwise(
    tiny_mlp, toy, optimizer_class, optimizer_kwargs, foreach
):
    policy_kwargs = dict(net_kwargs=tiny_mlp, optimizer_class=optimizer_class, optimizer_kwargs=optimizer_kwargs)
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=policy_kwargs, **FAST)
    assert model.policy.optimizer.defaults["foreach"] is foreach
    assert model.policy.optimizer_kwargs == (optimizer_kwargs or {"momentum": 0.9, "weight_decay": 1e-4})
