import json
import zipfile

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import DQN

from delayzoo.agents.common.plain_save import load_plain_zip, space_from_json, space_to_json


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
