"""A run's replay buffer on disk: plain arrays resume without --trust-run-files, pickles need it and say so."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3 import DQN, HerReplayBuffer
from stable_baselines3.common.envs import BitFlippingEnv

from delayzoo import PWM
from delayzoo.zoo import train
from delayzoo.zoo.buffers import buffer_suffix, load_buffer, save_buffer
from delayzoo.zoo.checkpoints import SaveBestModelCallback
from delayzoo.zoo.errors import ZooError
from tests.zoo.helpers import files_under

DQN_RUN = ["--algo", "dqn", "--env", "CartPole-v1", "--seed", "0", "-n", "64", "--eval-freq", "-1", "--num-threads",
           "1", "-params", "learning_starts:32", "buffer_size:500", "train_freq:16", "exploration_fraction:0.5"]


def test_sb3_replay_buffers_resume_from_plain_arrays_and_legacy_pickles_need_the_flag(tmp_path, capsys):
    assert train.main([*DQN_RUN, "-f", str(tmp_path / "logs"), "--save-replay-buffer"]) == 0
    run = tmp_path / "logs/dqn/CartPole-v1_1"
    saved = run / "replay_buffer.npz"
    assert saved.is_file() and not list(run.glob("*.pkl"))
    capsys.readouterr()

    def resume(folder: str, *flags: str) -> int:
        return train.main([*DQN_RUN, "-f", str(tmp_path / folder), "-i", str(run / "CartPole-v1.zip"), *flags])

    assert resume("resumed") == 0
    assert f"Loading replay buffer {saved}" in capsys.readouterr().out

    saved.unlink()  # as a run saved before plain buffers had their own name: SB3's pickle
    DQN("MlpPolicy", "CartPole-v1", buffer_size=500, device="cpu").save_replay_buffer(run / "replay_buffer.pkl")
    assert resume("refused") == 2
    error = capsys.readouterr().err
    assert f"{run / 'replay_buffer.pkl'} is a pickle" in error and "pass --trust-run-files" in error
    assert len(error.strip().splitlines()) == 1 and files_under(tmp_path / "refused") == []
    assert resume("trusted", "--trust-run-files") == 0


def test_a_resumed_replay_file_that_is_cut_short_exits_2_naming_it(tmp_path, capsys):
    assert train.main([*DQN_RUN, "-f", str(tmp_path / "logs"), "--save-replay-buffer"]) == 0
    run = tmp_path / "logs/dqn/CartPole-v1_1"
    saved = run / "replay_buffer.npz"
    saved.write_bytes(saved.read_bytes()[:1000])
    capsys.readouterr()
    assert train.main([*DQN_RUN, "-f", str(tmp_path / "resumed"), "-i", str(run / "CartPole-v1.zip")]) == 2
    error = capsys.readouterr().err
    assert f"replay buffer file {saved}: it is not a complete .npz archive" in error
    assert len(error.strip().splitlines()) == 1 and files_under(tmp_path / "resumed") == []


def test_buffers_holding_env_references_stay_pickles_that_need_the_flag(tmp_path):
    def her() -> DQN:
        env = BitFlippingEnv(n_bits=4, continuous=False)
        return DQN("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, learning_starts=8, buffer_size=100,
                   replay_buffer_kwargs=dict(n_sampled_goal=2), device="cpu")

    model = her().learn(20)
    assert buffer_suffix(model) == "pkl"
    save_buffer(model, tmp_path / "replay_buffer.pkl")
    other = her()
    with pytest.raises(ZooError, match="replay_buffer.pkl is a pickle .* pass --trust-run-files"):
        load_buffer(other, tmp_path / "replay_buffer.npz", trusted=False)
    assert load_buffer(other, tmp_path / "replay_buffer.npz", trusted=True) == tmp_path / "replay_buffer.pkl"
    assert other.replay_buffer.size() == model.replay_buffer.size() > 0


def test_our_agents_resume_buffers_saved_under_the_former_pickle_name(tmp_path):
    torch.set_num_threads(1)
    small = dict(buffer_size=200, learning_starts=64, device="cpu")
    model = PWM("MlpPolicy", "CartPole-v1", **small)
    model.learn(30)
    assert buffer_suffix(model) == "npz"
    model.save_replay_buffer(tmp_path / "replay_buffer.pkl")  # plain arrays under rl_zoo3's name
    other = PWM("MlpPolicy", "CartPole-v1", **small)
    assert load_buffer(other, tmp_path / "replay_buffer.npz", trusted=False) == tmp_path / "replay_buffer.pkl"
    np.testing.assert_array_equal(other.replay_buffer.observations[None], model.replay_buffer.observations[None])
    (tmp_path / "replay_buffer.pkl").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(ZooError, match=r"replay_buffer.pkl: it holds pickled data, which loading a replay buffer"):
        load_buffer(other, tmp_path / "replay_buffer.npz", trusted=False)


def test_a_new_best_model_is_written_atomically(tmp_path, ppo_run):
    assert (ppo_run / "logs/ppo/CartPole-v1_1/best_model.zip").is_file()  # the zoo's evaluation wrote it
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=100, device="cpu")
    callback = SaveBestModelCallback(tmp_path)
    callback.init_callback(model)
    callback.on_step()
    before = (tmp_path / "best_model.zip").read_bytes()

    def interrupted(path: str) -> None:
        with open(path, "wb") as handle:
            handle.write(b"half a model")
        raise KeyboardInterrupt

    model.save = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        callback.on_step()
    assert (tmp_path / "best_model.zip").read_bytes() == before and files_under(tmp_path) == ["best_model.zip"]
