"""DelayedEZ's keyword groups: a flat keyword of an earlier version (in a call, a model file, ``load``) lands in
its group with a ``FutureWarning`` naming the new home; files written before the groups load, train and save."""

from __future__ import annotations

import pathlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from delayzoo.agents.delayed_ez.config import FORMER_KEYWORDS
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ

DATA = pathlib.Path(__file__).with_name("data")
OLD_MODEL = DATA / "dez_before_groups.zip"
"""Saved by the code before the groups (commit a3531a1) with segment_length=8, visit_temperature=0.5,
pb_c_init=1.5 and priority_alpha=0.5, trained 40 CartPole steps; its replay is ``dez_before_groups_replay.npz``."""


def _tiny(**kwargs):
    net = dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8, proj_out=8,
               pred_hidden=4, support_size=10)
    return DelayedEZ("MlpPolicy", gym.make("CartPole-v1"), learning_starts=16, batch_size=4, num_simulations=3,
                     prefetch=False, seed=0, device="cpu", policy_kwargs=dict(net_kwargs=net), **kwargs)


def test_every_former_keyword_has_a_group_that_takes_it():
    assert set(FORMER_KEYWORDS) == {
        "pb_c_base", "pb_c_init", "dirichlet_alpha", "exploration_fraction", "visit_temperature", "priority_alpha",
        "priority_beta", "segment_length", "self_play_actors", "reanalysis_actors", "ray_address", "envs_per_actor",
        "self_play_update_interval", "self_play_resources", "reanalysis_resources", "actor_max_restarts",
        "placement_timeout", "reanalysis_chunk",
    }


def test_a_flat_keyword_in_a_call_moves_into_its_group_with_a_future_warning():
    with pytest.warns(FutureWarning) as caught:
        model = _tiny(pb_c_init=1.5, visit_temperature=0.5, segment_length=8, placement_timeout=5.0)
    message = str(caught[0].message)
    for moved in ("pb_c_init -> search_kwargs['pb_c_init']", "segment_length -> replay_buffer_kwargs['segment_length']",
                  "placement_timeout -> actor_kwargs['placement_timeout']"):
        assert moved in message, message
    assert model.search_kwargs == {"pb_c_init": 1.5, "visit_temperature": 0.5}
    assert model.search_config.pb_c_init == 1.5 and model.search_config.temperature(1.0) == 0.5
    assert model.replay_config.segment_length == 8 and model.actor_config.placement_timeout == 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the groups themselves warn of nothing
        grouped = _tiny(search_kwargs=dict(pb_c_init=1.5, visit_temperature=0.5),
                        replay_buffer_kwargs=dict(segment_length=8), actor_kwargs=dict(placement_timeout=5.0))
    assert grouped.search_config == model.search_config and grouped.replay_config == model.replay_config


def test_a_keyword_given_both_ways_or_unknown_is_refused_naming_it():
    with pytest.raises(ValueError, match="pb_c_init is given twice in DelayedEZ"):
        _tiny(pb_c_init=1.5, search_kwargs=dict(pb_c_init=1.0))
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['pb_c_int'\]"):
        _tiny(pb_c_int=1.5)
    with pytest.raises(ValueError, match="search_kwargs has an unknown key 'num_simulations'"):
        _tiny(search_kwargs=dict(num_simulations=3))
    with pytest.raises(ValueError, match="replay_buffer_kwargs has an unknown key 'capacity'"):
        _tiny(replay_buffer_kwargs=dict(capacity=3))


def test_a_model_file_written_before_the_groups_loads_trains_and_saves_in_them(tmp_path):
    with pytest.warns(FutureWarning, match=f"the model file {OLD_MODEL} gives them flat"):
        model = DelayedEZ.load(OLD_MODEL, env=gym.make("CartPole-v1"), device="cpu")
    assert model.search_config.pb_c_init == 1.5 and model.search_config.visit_temperature == 0.5
    assert model.replay_config.segment_length == 8 and model.replay_config.priority_alpha == 0.5
    assert model.num_timesteps == 40 and model._n_updates == 24
    model.load_replay_buffer(DATA / "dez_before_groups_replay.npz")
    assert len(model.replay_buffer) > 0
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    assert model.action_space.contains(int(model.predict(obs, deterministic=True)[0]))
    model.learn(8, reset_num_timesteps=False)
    assert model.num_timesteps == 48 and model._n_updates > 24
    model.save(tmp_path / "again.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reloaded = DelayedEZ.load(tmp_path / "again.zip", device="cpu")
    assert reloaded.search_kwargs == model.search_kwargs and reloaded.replay_buffer_kwargs == {
        "segment_length": 8, "priority_alpha": 0.5, "priority_beta": 0.4}
    for name, value in model.policy.state_dict().items():
        assert torch.equal(reloaded.policy.state_dict()[name], value)


def test_load_takes_former_actor_keywords_into_actor_kwargs():
    with pytest.warns(FutureWarning, match=r"self_play_update_interval -> actor_kwargs\['self_play_update_interval'\]"):
        model = DelayedEZ.load(OLD_MODEL, env=gym.make("CartPole-v1"), device="cpu", self_play_update_interval=7)
    assert model.actor_config.self_play_update_interval == 7 and not model.actor_config.active
    np.testing.assert_equal(model.actor_kwargs, {"self_play_update_interval": 7})
