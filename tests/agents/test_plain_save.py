import io
import json
import os
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import DQN

from delayzoo.agents.common.plain_save import load_plain_zip, space_from_json, space_to_json
from delayzoo.agents.pwm import PWM
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation
from tests.agents.test_checks import AGENTS


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(0, 255, (3, 8, 8), np.uint8),
        spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, np.inf]), dtype=np.float32),
        spaces.Discrete(5, start=-1),
        spaces.MultiDiscrete([2, 3, 4]),
        spaces.MultiBinary(4),
        spaces.Dict({"observation": spaces.Box(-1, 1, (2,)), "delay": spaces.Discrete(3)}),
    ],
)
def test_spaces_round_trip_through_plain_json(space):
    text = json.dumps(space_to_json(space))
    assert space_from_json(json.loads(text)) == space


def test_unknown_spaces_are_rejected():
    with pytest.raises(TypeError, match="Tuple"):
        space_to_json(spaces.Tuple([spaces.Discrete(2)]))
    with pytest.raises(ValueError, match="Graph"):
        space_from_json({"type": "Graph"})


def test_loading_refuses_pickled_entries(tmp_path):
    DQN("MlpPolicy", "CartPole-v1", learning_starts=0, buffer_size=10).save(tmp_path / "dqn")
    with zipfile.ZipFile(tmp_path / "dqn.zip") as archive:
        assert ":serialized:" in archive.read("data").decode()
    with pytest.raises(ValueError, match="pickled"):
        load_plain_zip(tmp_path / "dqn")


# ---------------------------------------------------------------- crafted files run no code, get one message

NOT_OURS = "not a delayzoo model file: "


class Payload:
    """Unpickling it creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def saved(algo, tmp_path):
    agent, fast = AGENTS[algo]
    path = tmp_path / f"{algo}.zip"
    agent("MlpPolicy", "CartPole-v1", **fast).save(path)
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    return agent, path, entries


def rewrite(path, entries, **changes):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in {**entries, **changes}.items():
            archive.writestr(name, content)


def edited_data(entries, edit):
    data = json.loads(entries["data"])
    edit(data)
    return json.dumps(data)


CRAFTED = {
    "counter-of-wrong-type": (
        lambda d: d["counters"].update(num_timesteps="abc"),
        "counter 'num_timesteps' must be an integer",
    ),
    "counter-not-written": (lambda d: d["counters"].update(policy=3), "its counters must be"),
    "negative-counter": (lambda d: d["counters"].update(_n_updates=-5), "counter '_n_updates' must be an integer >= 0"),
    "bool-counter": (lambda d: d["counters"].update(n_envs=True), "counter 'n_envs' must be an integer"),
    "unknown-setting": (lambda d: d["init"].update(replay_buffer_class="os.system"), "does not take"),
    "setting-out-of-range": (lambda d: d["init"].update(gamma=7.0), "gamma must be in [0, 1], got 7.0"),
    "extra-key": (lambda d: d.update(code="print(1)"), "its 'data' entry must have the keys"),
    "pickled-space": (lambda d: d.update(observation_space={":serialized:": "gAR9lC4="}), "holds a pickled object"),
    "huge-space": (lambda d: d["observation_space"].update(shape=[100000, 100000]), "larger than"),
    "object-dtype": (lambda d: d["observation_space"].update(dtype="object"), "numeric dtype"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_crafted_data_entries_are_refused_with_one_message(algo, case, tmp_path):
    agent, path, entries = saved(algo, tmp_path)
    edit, reason = CRAFTED[case]
    rewrite(path, entries, data=edited_data(entries, edit))
    with pytest.raises(ValueError) as error:
        agent.load(path, device="cpu")
    assert str(error.value).startswith(NOT_OURS) and reason in str(error.value)


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_a_pickle_payload_in_a_tensor_entry_runs_nothing(algo, tmp_path):
    agent, path, entries = saved(algo, tmp_path)
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save({"weights": Payload(marker)}, buffer)
    rewrite(path, entries, **{"policy.pth": buffer.getvalue()})
    with pytest.raises(ValueError) as error:
        agent.load(path, device="cpu")
    message = str(error.value)
    assert message.startswith(NOT_OURS) and "tensor entries" in message and "weights_only" not in message
    assert not marker.exists()


def test_an_oversized_data_entry_is_refused_before_parsing(tmp_path):
    agent, path, entries = saved("pwm", tmp_path)
    rewrite(path, entries, data="[" * (6 * 1024 * 1024))  # compresses to a few kB
    assert path.stat().st_size < 100_000
    with pytest.raises(ValueError, match=f"{NOT_OURS}.*larger than"):
        agent.load(path)


@pytest.mark.parametrize("content, reason", [(b"not a zip", "not a zip archive"), (None, "no 'data' entry")])
def test_other_files_are_refused(content, reason, tmp_path):
    path = tmp_path / "model.zip"
    if content is None:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("other", "x")
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{NOT_OURS}.*{reason}"):
        PWM.load(path)


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_a_model_trained_with_the_pending_view_saves_its_alias_and_loads_with_its_env(algo, tmp_path):
    agent, fast = AGENTS[algo]
    env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), 2))
    model = agent("MultiInputPolicy", env, **fast)
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        assert json.loads(archive.read("data"))["policy"] == "MultiInputPolicy"
    loaded = agent.load(tmp_path / "model.zip", env=env, device="cpu")
    assert loaded._policy_name() == "MultiInputPolicy"
    loaded.learn(4)
