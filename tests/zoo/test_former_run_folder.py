"""A zoo run folder written before DelayedEZ's keyword groups (``data/run_before_groups``: a 48-step CartPole run
whose YAML entry set ``segment_length``, ``visit_temperature`` and ``priority_alpha`` flat, made by commit a3531a1)
evaluates and resumes, with a ``FutureWarning`` naming the groups; the resumed run records the groups."""

from __future__ import annotations

import pathlib
import shutil

import pytest
import torch

from delayzoo.zoo import eval as zoo_eval
from delayzoo.zoo import train
from delayzoo.zoo.runs import read_run_yaml

RUN = pathlib.Path(__file__).with_name("data") / "run_before_groups"
FLAT_ENTRY = (RUN / "delayed_ez" / "CartPole-v1_1" / "CartPole-v1" / "config.yml").read_text()


@pytest.fixture
def old_run(tmp_path: pathlib.Path) -> pathlib.Path:
    logs = tmp_path / "logs"
    shutil.copytree(RUN, logs)
    return logs


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_old_run_evaluates_with_a_future_warning(old_run, tmp_path):
    output = tmp_path / "scores.csv"
    argv = ["--algo", "delayed_ez", "--env", "CartPole-v1", "-f", str(old_run), "-n", "2", "--num-threads", "1",
            "--checkpoints", "last", "-o", str(output)]
    with pytest.warns(FutureWarning, match=r"segment_length -> replay_buffer_kwargs\['segment_length'\]"):
        assert zoo_eval.main(argv) == 0
    assert output.read_text().startswith("step,episode_0,episode_1\n48,")


def test_the_old_run_resumes_from_its_flat_entry_and_records_the_groups(old_run, tmp_path):
    # the run's own config.yml, as a YAML entry of the flat keywords
    entry = "CartPole-v1:\n" + "".join(f"  {line}\n" for line in FLAT_ENTRY.splitlines() if not line.startswith(
        ("delay:", "  ")) and line.split(":")[0] not in ("policy_kwargs",)) + "  policy_kwargs: \"" + \
        read_run_yaml(RUN / "delayed_ez" / "CartPole-v1_1" / "CartPole-v1" / "config.yml")["policy_kwargs"] + "\"\n"
    (tmp_path / "flat.yml").write_text(entry)
    model = old_run / "delayed_ez" / "CartPole-v1_1" / "CartPole-v1.zip"
    argv = ["--algo", "delayed_ez", "--env", "CartPole-v1", "-conf", str(tmp_path / "flat.yml"), "-i", str(model),
            "-n", "16", "--eval-freq", "-1", "--num-threads", "1", "-f", str(old_run)]
    with pytest.warns(FutureWarning, match=r"visit_temperature -> search_kwargs\['visit_temperature'\]"):
        assert train.main(argv) == 0
    config = read_run_yaml(old_run / "delayed_ez" / "CartPole-v1_2" / "CartPole-v1" / "config.yml")
    assert config["replay_buffer_kwargs"] == {"segment_length": 8, "priority_alpha": 0.5}
    assert config["search_kwargs"] == {"visit_temperature": 0.5} and "segment_length" not in config


def test_a_committed_benchmark_cells_hyperparameters_build_the_agent_in_the_groups():
    """The delay benchmark's first DelayedEZ cells were trained before the groups: their config.yml
    (``data/benchmark_cell_before_groups``, copied from the CartPole seed-0 cell) builds the same agent, with the
    FutureWarning."""
    from delayzoo.agents.delayed_ez import DelayedEZ
    from delayzoo.zoo.trust import safe_hyperparams

    config = read_run_yaml(RUN.with_name("benchmark_cell_before_groups") / "config.yml")
    settings = {key: value for key, value in config.items()
                if key not in ("delay", "env_wrapper", "n_envs", "n_timesteps", "policy", "frame_stack")}
    settings = safe_hyperparams(settings, "the committed cell's config.yml")
    with pytest.warns(FutureWarning, match=r"segment_length -> replay_buffer_kwargs\['segment_length'\]"):
        model = DelayedEZ("MlpPolicy", "CartPole-v1", device="cpu", **settings)
    assert model.replay_config.segment_length == 100 and model.search_config.visit_temperature == 0.5
    assert model.search_config.q_normalization == "parent_siblings"
