import gc
import json
import os
import signal
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from delayzoo.agents.delayed_ez.actors import ReanalysisActor
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.reanalysis import (
    ProcessPrefetch,
    Reanalysis,
    ReanalysisConfig,
    ReanalysisCounts,
    ReanalysisWorker,
    batch_stacks,
    compute_targets,
)
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

# 48 updates per run, the last target refresh before the end (a stale worker would show after set_parameters)
FAST = dict(learning_starts=16, batch_size=4, num_simulations=3, replay_buffer_kwargs=dict(segment_length=8),
            lr_warmup_steps=10,
            reanalyze_ratio=0.5, target_update_interval=5, gradient_steps=2, seed=0)


def _trained(kind, tiny, toy, prefetch, steps=40, mixed_precision=False, **kwargs):
    env = PendingActionsObservation(ExecutionDelay(toy(kind), RandomWalkDelay(3, p=0.3)))
    policy_kwargs = dict(net_kwargs=tiny, mixed_precision=mixed_precision)
    model = DelayedEZ("MultiInputPolicy", env, policy_kwargs=policy_kwargs, prefetch=prefetch, **{**FAST, **kwargs})
    model.learn(steps)
    return model


@pytest.mark.parametrize("kind", ["vector", "image"])
def test_reanalysis_in_a_worker_process_trains_exactly_like_the_prefetch_thread(kind, tiny_mlp, tiny_conv, toy):
    tiny = tiny_mlp if kind == "vector" else tiny_conv
    thread, process = (_trained(kind, tiny, toy, prefetch) for prefetch in (True, "process"))
    assert thread._n_updates == process._n_updates == 2 * (40 - 16) > 3 * FAST["target_update_interval"]
    assert process._round_targets.pending is None  # nothing is left running after learn
    for name, value in thread.policy.network.state_dict().items():
        assert torch.equal(process.policy.network.state_dict()[name], value), name
    assert process._rng.bit_generator.state == thread._rng.bit_generator.state
    assert process._round_targets.worker is not None and process._round_targets.worker.cpu_seconds > 0
    unprefetched = _trained(kind, tiny, toy, False)  # the test can tell runs apart: a different sampling order
    assert not torch.equal(unprefetched.policy.network.state_dict()[name], value)


def test_the_worker_gets_the_new_target_network_after_set_parameters(tiny_mlp, toy):
    reference, model = (_trained("vector", tiny_mlp, toy, prefetch) for prefetch in (True, "process"))
    weights = {name: value * 0.5 if value.is_floating_point() else value.clone()  # the target network too
               for name, value in reference.get_parameters()["policy"].items()}
    for each in (reference, model):
        each.set_parameters({"policy": weights}, exact_match=False)
        each.learn(12, reset_num_timesteps=False)
    for name, value in reference.policy.network.state_dict().items():
        assert torch.equal(model.policy.network.state_dict()[name], value), name


class _FailingSearch:
    def search(self, *args, **kwargs):
        raise RuntimeError("search failed in the worker")


def test_an_error_in_the_worker_is_raised_in_the_training_process_and_the_worker_stops_with_its_owner(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, False)
    batches = [model.replay_buffer.sample(4, model.target_config, model._rng, 1.0)]
    config = ReanalysisConfig(frame_stack=1, reanalyze_ratio=1.0)
    worker = ReanalysisWorker(Reanalysis(model.policy.target_network, _FailingSearch(), config, model.device))
    prefetch = ProcessPrefetch(batches, worker, model._rng, None, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="search failed in the worker"):
        prefetch.result()
    process = worker._process
    assert process.is_alive()  # it reported the error and waits for the next batches
    del worker, prefetch
    gc.collect()
    process.join(timeout=10)
    assert not process.is_alive()


def test_a_process_prefetch_model_saves_loads_and_keeps_its_mode(tmp_path, tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, "process")
    model.save(tmp_path / "model")
    loaded = DelayedEZ.load(tmp_path / "model", env=model.env)
    assert loaded.prefetch == "process" and loaded._round_targets.worker is None  # started at its first update
    loaded.learn(20)
    assert loaded._round_targets.worker is not None and loaded._n_updates == model._n_updates + 2 * (20 - 16)


@pytest.mark.parametrize("value", ["thread", "proc", 1, None])
def test_bad_prefetch_values_are_named(value, tiny_mlp, toy):
    with pytest.raises(ValueError, match=f"prefetch must be True, False or 'process', got {value!r}"):
        DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), prefetch=value)


def test_the_worker_leaves_ctrl_c_to_the_training_process_and_ends_quietly_on_sigterm(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, "process")
    process = model._round_targets.worker._process
    os.kill(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    model.learn(4, reset_num_timesteps=False)  # the worker still answers
    assert process.is_alive()
    os.kill(process.pid, signal.SIGTERM)
    process.join(timeout=10)
    assert process.exitcode == -signal.SIGTERM  # no handler inherited from the parent ran


def test_process_prefetch_off_the_cpu_is_refused_naming_the_device(tiny_mlp, toy):
    # "meta" stands for a GPU here: SB3 turns "cuda" into the CPU on a machine without one
    message = "prefetch='process' reanalyses in a CPU worker process, but the model is on meta"
    with pytest.raises(ValueError, match=message):
        DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), prefetch="process",
                  device="meta")


def test_positions_without_a_stored_search_policy_are_reanalysed_when_asked(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, False)  # with forecast searches stored: rows at the
    model.forecast_policy = "reanalyse"  # filler steps have none; from now on none is stored at all
    model.learn(16, reset_num_timesteps=False)
    batch = model.replay_buffer.sample(16, model.target_config, model._rng, 1.0)
    stored = batch.stored_policy_mask.astype(bool)
    assert batch.policy_valid.any() and not stored[batch.policy_valid].all()
    for missing in (False, True):
        (_, policies, mask), = compute_targets(
            model.policy.target_network, model.policy.mcts, [batch], np.random.default_rng(0), frame_stack=1,
            reanalyze_ratio=0.0, chunk=None, device=torch.device("cpu"), reanalyse_missing=missing,
        )
        expected = batch.policy_valid if missing else stored
        np.testing.assert_array_equal(mask.numpy().astype(bool), expected)
        torch.testing.assert_close(policies[torch.as_tensor(expected)].sum(-1), torch.ones(int(expected.sum())))


def test_root_value_targets_bootstrap_from_a_search_at_the_bootstrap_observations(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, False)
    batch = model.replay_buffer.sample(8, model.target_config, model._rng, 1.0)
    net, mcts, cpu = model.policy.target_network, model.policy.mcts, torch.device("cpu")
    settings = dict(frame_stack=1, reanalyze_ratio=0.0, chunk=None, device=cpu)
    (predicted, _, _), = compute_targets(net, mcts, [batch], np.random.default_rng(0), **settings)
    (rooted, _, _), = compute_targets(net, mcts, [batch], np.random.default_rng(0), use_root_value=True, **settings)
    with torch.no_grad():
        root = net.initial_inference(batch_stacks(batch, batch.bootstrap_offset, 1, cpu).flatten(0, 1))
        search = mcts.search(net, root.latent, root.policy_logits, np.random.default_rng(0), True)
        value = net.to_scalar(root.value_logits).view(batch.returns.shape)
    returns, discount = torch.as_tensor(batch.returns), torch.as_tensor(batch.bootstrap_discount)
    root_values = torch.as_tensor(search.root_values, dtype=torch.float32).view(batch.returns.shape)
    torch.testing.assert_close(rooted, returns + discount * root_values)
    torch.testing.assert_close(predicted, returns + discount * value)  # the default is unchanged
    bootstrapped = discount > 0
    assert bootstrapped.any() and not torch.allclose(rooted[bootstrapped], predicted[bootstrapped])


def test_root_values_and_mixed_precision_reach_the_worker_process(tiny_mlp, toy):
    settings = dict(steps=28, use_root_value=True, mixed_precision=True)
    thread, process = (_trained("vector", tiny_mlp, toy, prefetch, **settings) for prefetch in (True, "process"))
    assert process._n_updates == 2 * (28 - 16) and process._round_targets.worker is not None
    for name, value in thread.policy.network.state_dict().items():
        assert torch.equal(process.policy.network.state_dict()[name], value), name
    predicted = _trained("vector", tiny_mlp, toy, "process", steps=28, mixed_precision=True)
    assert not torch.equal(predicted.policy.network.state_dict()[name], value)


def test_a_reanalysis_actor_computes_the_learners_targets_with_its_settings(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, False, steps=20, use_root_value=True, mixed_precision=True)
    actor = ReanalysisActor(0, model.actor_parts(), (model.observation_space, model.action_space), seed=0)
    assert actor.reanalysis.config.mixed_precision is True and actor.reanalysis.config.use_root_value
    actor.reanalysis.target_network.load_state_dict(model.policy.target_network.state_dict())
    actor.version = 0  # the weights are there: no fetch from Ray
    batches = [model.replay_buffer.sample(4, model.target_config, model._rng, 1.0)]
    actor.rng.bit_generator.state = model._rng.bit_generator.state  # the same search noise
    arrays, counts, _ = actor.targets(batches, 0, [])
    expected_counts = ReanalysisCounts()
    expected_targets = model._reanalysis().targets(batches, model._rng, expected_counts)
    for got, expected in zip(arrays[0], expected_targets[0]):
        np.testing.assert_array_equal(got, expected.numpy())
    fields = ("reanalysed", "compared", "overturned", "dropped")
    assert [getattr(counts, f) for f in fields] == [getattr(expected_counts, f) for f in fields]
    np.testing.assert_array_equal(counts.actions, expected_counts.actions)
    assert counts.reanalysed > 0


def _gumbel(tiny_mlp, toy, **kwargs):
    """A vector model trained with Gumbel searches, every target reanalysed."""
    search = dict(method="gumbel", num_considered_actions=2, gumbel_scale=1.0)
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), search_kwargs=search,
                      **{**FAST, "reanalyze_ratio": 1.0, **kwargs})
    model.learn(40)
    return model


def test_reanalysis_leaves_the_stored_arrays_unchanged(tiny_mlp, toy):
    model = _trained("vector", tiny_mlp, toy, False)
    batch = model.replay_buffer.sample(16, model.target_config, model._rng, 1.0)
    stored, stored_mask = batch.stored_policy.copy(), batch.stored_policy_mask.copy()
    (_, policies, mask), = compute_targets(
        model.policy.target_network, model.policy.mcts, [batch], np.random.default_rng(0), frame_stack=1,
        reanalyze_ratio=1.0, chunk=None, device=torch.device("cpu"),
    )
    np.testing.assert_array_equal(batch.stored_policy, stored)
    np.testing.assert_array_equal(batch.stored_policy_mask, stored_mask)
    assert not np.allclose(policies.numpy(), stored)  # the targets did change
    policies += 1.0
    mask += 1.0
    np.testing.assert_array_equal(batch.stored_policy, stored)  # and share no memory with the batch
    np.testing.assert_array_equal(batch.stored_policy_mask, stored_mask)


def test_the_consistency_filter_drops_exactly_the_targets_whose_top_action_the_search_did_not_select(tiny_mlp, toy):
    model = _gumbel(tiny_mlp, toy)
    batch = model.replay_buffer.sample(32, model.target_config, model._rng, 1.0)
    net, mcts, cpu = model.policy.target_network, model.policy.mcts, torch.device("cpu")
    settings = dict(frame_stack=1, reanalyze_ratio=1.0, chunk=None, device=cpu)
    (_, unfiltered, unfiltered_mask), = compute_targets(net, mcts, [batch], np.random.default_rng(0), **settings)
    counts = ReanalysisCounts()
    (_, policies, mask), = compute_targets(
        net, mcts, [batch], np.random.default_rng(0), consistency_filter=True, counts=counts, **settings
    )
    rows, cols = np.nonzero(batch.policy_valid)  # every valid position is reanalysed, in this order
    with torch.no_grad():
        root = net.initial_inference(batch_stacks(batch, batch.policy_offset, 1, cpu)[rows, cols])
    search = mcts.search(net, root.latent, root.policy_logits, np.random.default_rng(0), True,
                         root_value_logits=root.value_logits)
    top = search.policy.argmax(axis=1)
    disagree = top != search.actions
    assert 0 < disagree.sum() < len(disagree)  # both kinds are there
    torch.testing.assert_close(policies, unfiltered)  # the same targets: only the mask differs
    assert unfiltered_mask[rows, cols].all()
    expected = unfiltered_mask.clone()
    expected[rows[disagree], cols[disagree]] = 0.0
    torch.testing.assert_close(mask, expected)
    stored = batch.stored_policy_mask[rows, cols] > 0
    assert stored.any()
    overturned = batch.stored_policy[rows, cols].argmax(axis=1)[stored] != top[stored]
    assert (counts.reanalysed, counts.compared, counts.overturned, counts.dropped) == (
        len(rows), stored.sum(), overturned.sum(), disagree.sum()
    )
    np.testing.assert_array_equal(counts.actions, np.bincount(top, minlength=2))


def test_each_round_logs_the_overturned_targets_and_the_share_of_each_action(tiny_mlp, toy):
    model = _gumbel(tiny_mlp, toy, consistency_filter=True)
    model.train(2, 8)
    logged = model.logger.name_to_value
    assert 0.0 <= logged["reanalysis/overturned"] <= 1.0
    assert 0.0 <= logged["reanalysis/dropped"] <= 1.0
    assert logged["reanalysis/action_share_0"] + logged["reanalysis/action_share_1"] == pytest.approx(1.0)
    model = _trained("vector", tiny_mlp, toy, False, reanalyze_ratio=0.0, steps=20)
    model.train(1, 8)
    assert "reanalysis/overturned" not in model.logger.name_to_value  # nothing reanalysed, nothing logged
    assert "train/loss" in model.logger.name_to_value


def test_the_filter_and_a_chunk_reach_the_worker_process_and_the_filter_is_saved(tmp_path, tiny_mlp, toy):
    model = _gumbel(tiny_mlp, toy, consistency_filter=True, prefetch="process", actor_kwargs=dict(reanalysis_chunk=5))
    assert model._reanalysis().config.consistency_filter and model._reanalysis().config.chunk == 5
    thread = _gumbel(tiny_mlp, toy, consistency_filter=True, prefetch=True, actor_kwargs=dict(reanalysis_chunk=5))
    for name, value in thread.policy.network.state_dict().items():
        assert torch.equal(model.policy.network.state_dict()[name], value), name
    model.save(tmp_path / "model")
    loaded = DelayedEZ.load(tmp_path / "model", env=toy("vector"))
    assert loaded.consistency_filter is True and loaded._reanalysis().config.consistency_filter
    assert loaded.actor_config.reanalysis_chunk is None  # a run setting: not in the file


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(consistency_filter="yes"), TypeError, "consistency_filter must be True or False, got 'yes'"),
        (dict(consistency_filter=1), TypeError, "consistency_filter must be True or False, got 1"),
        (dict(actor_kwargs=dict(reanalysis_chunk=0)), ValueError, "reanalysis_chunk"),
        (dict(actor_kwargs=dict(reanalysis_chunk=2.5)), (TypeError, ValueError), "reanalysis_chunk"),
    ],
)
def test_bad_reanalysis_settings_are_named(kwargs, error, match, tiny_mlp, toy):
    with pytest.raises(error, match=match):
        DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), **kwargs)


def _with_init(path: Path, **settings) -> None:
    """Rewrite a model file's saved settings as an earlier version wrote them."""
    with zipfile.ZipFile(path) as file:
        entries = {name: file.read(name) for name in file.namelist()}
    data = json.loads(entries["data"])
    data["init"].update(settings)
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as file:
        for name, content in entries.items():
            file.writestr(name, content)


def test_the_former_flat_reanalysis_chunk_moves_into_the_run_settings(tmp_path, tiny_mlp, toy):
    with pytest.warns(FutureWarning, match=r"reanalysis_chunk -> actor_kwargs\['reanalysis_chunk'\]"):
        model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), reanalysis_chunk=64)
    assert model.actor_config.reanalysis_chunk == 64 and model._reanalysis().config.chunk == 64
    model.save(tmp_path / "old.zip")
    _with_init(tmp_path / "old.zip", reanalysis_chunk=256)  # an earlier version saved it flat
    with pytest.warns(UserWarning, match=r"pass actor_kwargs=\{'reanalysis_chunk': 256\} to load"):
        with pytest.warns(FutureWarning, match="reanalysis_chunk"):
            loaded = DelayedEZ.load(tmp_path / "old.zip", env=toy("vector"))
    assert loaded.actor_config.reanalysis_chunk is None
    _with_init(tmp_path / "old.zip", reanalysis_chunk=None)  # the default: nothing to pass again
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.warns(FutureWarning):
            DelayedEZ.load(tmp_path / "old.zip", env=toy("vector"))


_ORPHAN_SCRIPT = """
import sys, threading, time
import torch
torch.set_num_threads(1)
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.reanalysis import ReanalysisWorker
from tests.agents.delayed_ez.conftest import TINY_MLP
model = DelayedEZ("MlpPolicy", "CartPole-v1", policy_kwargs=dict(net_kwargs=TINY_MLP), prefetch="process")
workers = []
start = lambda: workers.append(ReanalysisWorker(model._reanalysis()))
if sys.argv[1] == "main":
    start()
else:  # the starting thread ends long before the training process
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
print(workers[0]._process.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("thread", ["main", "other"])
def test_the_worker_ends_when_the_training_process_is_killed(thread):
    repo = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT, thread], cwd=repo, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        worker = int(parent.stdout.readline())
        time.sleep(1.5)
        assert not _gone(worker)  # alive while the training process is (its starting thread ended already)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while not _gone(worker):
        assert time.monotonic() < deadline, f"the reanalysis worker {worker} outlived the killed training process"
        time.sleep(0.1)
