"""Nothing in a YAML file or a run folder runs code: every probe leaves its marker absent and exits 2."""

from __future__ import annotations

import glob
import json
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from rl_zoo3 import __file__ as rl_zoo3_file

from delayzoo import PWM
from delayzoo.zoo import eval as zoo_eval
from delayzoo.zoo import train
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.hyperparams import hyperparams_dir
from delayzoo.zoo.trust import check_names, parse_kwargs, resolve_name, safe_hyperparams
from tests.zoo.helpers import TINY_PPO, files_under, run_module

BOUNDED = ["-n", "64", "--eval-freq", "-1", "--num-threads", "1"]


class Payload:
    """Unpickling it creates the folder ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.makedirs, (self.marker,))


def all_kwargs_strings() -> list[str]:
    """Every keyword string of our hyperparameter files and of rl_zoo3's own."""
    found = []
    rl_zoo3_dir = Path(glob.escape(str(Path(rl_zoo3_file).parent)))
    files = sorted(hyperparams_dir().glob("*.yml")) + sorted(rl_zoo3_dir.glob("hyperparams/*.yml"))
    for path in files:
        for entry in (yaml.safe_load(path.read_text()) or {}).values():
            if isinstance(entry, dict):
                found += [entry[key] for key in ("policy_kwargs", "replay_buffer_kwargs", "normalize")
                          if isinstance(entry.get(key), str)]
    return found


def test_every_keyword_string_of_the_zoo_and_rl_zoo3_files_parses():
    strings = all_kwargs_strings()
    assert len(strings) > 50
    for text in strings:
        assert isinstance(parse_kwargs(text, "test"), dict), text


@pytest.mark.parametrize("trusted", [False, True])
def test_search_kwargs_strings_are_parsed_with_or_without_trust(trusted):
    """rl_zoo3 evaluates policy_kwargs and its own keys, never DelayedEZ's search_kwargs: the zoo parses it."""
    entry = {"search_kwargs": "dict(method='gumbel', c_visit=50)", "policy_kwargs": "dict(net_arch=[8])"}
    safe = safe_hyperparams(entry, "test.yml", trusted=trusted)
    assert safe["search_kwargs"] == {"method": "gumbel", "c_visit": 50}
    assert safe["policy_kwargs"] == ("dict(net_arch=[8])" if trusted else {"net_arch": [8]})  # trusted: rl_zoo3's
    assert safe_hyperparams({"search_kwargs": {"method": "gumbel"}}, "test.yml", trusted)["search_kwargs"] == {
        "method": "gumbel"
    }
    with pytest.raises(ZooError, match="search_kwargs in test.yml"):
        safe_hyperparams({"search_kwargs": "dict(method=__import__('os'))"}, "test.yml", trusted)


def test_parsed_values_equal_what_python_would_build():
    value = parse_kwargs(
        "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[256], vf=(64, 64)), "
        "optimizer_class=th.optim.Adam, optimizer_kwargs={'eps': 1e-5}, features=None, other=torch.nn.Tanh, x=+3)",
        "test",
    )
    assert value == dict(
        log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU, net_arch=dict(pi=[256], vf=(64, 64)),
        optimizer_class=torch.optim.Adam, optimizer_kwargs={"eps": 1e-5}, features=None, other=torch.nn.Tanh, x=3,
    )


def test_delayzoos_own_classes_are_read_by_their_full_name_and_nothing_else_of_its_modules():
    from delayzoo.agents.common.extractors import SmallCNN

    value = parse_kwargs("dict(features_extractor_class=delayzoo.agents.common.extractors.SmallCNN)", "test")
    assert value == dict(features_extractor_class=SmallCNN)
    for text in ("dict(a=delayzoo.zoo.trust.importlib)", "dict(a=delayzoo.zoo.trust.parse_kwargs)", "dict(a=delay.X)"):
        with pytest.raises(ZooError, match="is not allowed in"):
            parse_kwargs(text, "test")


PAYLOADS = [
    "__import__('os').makedirs('{marker}')",
    "dict(a=__import__('os').makedirs('{marker}'))",
    "dict(a=open('{marker}', 'w'))",
    "dict(a=nn.Module.__subclasses__())",
    "dict(a=nn.functional.relu)",
    "dict(a=th.nn.modules.module.sys)",
    "dict(a=nn.__class__)",
    "dict(a=(lambda: 1)())",
    "dict(a=[x for x in 'ab'])",
    "dict(a=2 ** 100000)",
    "dict(**{{'a': 1}})",
    "eval('1')",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_keyword_payloads_are_refused_and_run_nothing(payload, tmp_path):
    text = payload.format(marker=tmp_path / "marker")
    with pytest.raises(ZooError, match="is not allowed in|is not valid"):
        parse_kwargs(text, "policy_kwargs in test.yml")
    assert not (tmp_path / "marker").exists()


def test_names_resolve_only_under_the_allow_list_and_to_the_expected_kind():
    import gymnasium as gym

    assert resolve_name("gymnasium.wrappers.ClipReward", gym.Wrapper, "test") is gym.wrappers.ClipReward
    with pytest.raises(ZooError, match="'pydoc.pipepager' is outside the packages the zoo imports from files"):
        resolve_name("pydoc.pipepager", gym.Wrapper, "test")
    with pytest.raises(ZooError, match="is not a Wrapper class"):
        resolve_name("stable_baselines3.common.save_util.load_from_pkl", gym.Wrapper, "test")
    assert resolve_name("pydoc.Helper", object, "test", trusted=True).__name__ == "Helper"


def conf(tmp_path: Path, **entry) -> str:
    """A -conf file for CartPole-v1 with the tiny PPO settings plus ``entry``."""
    base = {"policy": "MlpPolicy", "n_timesteps": 64, "n_steps": 64, "batch_size": 64, "n_epochs": 1}
    path = tmp_path / "conf.yml"
    path.write_text(yaml.safe_dump({"CartPole-v1": {**base, **entry}}))
    return str(path)


def yaml_probes(marker: Path) -> dict[str, tuple[dict, str]]:
    return {
        "policy_kwargs": ({"policy_kwargs": f"dict(net_arch=__import__('os').makedirs('{marker}'))"},
                          "policy_kwargs in"),
        "normalize": ({"normalize": f"dict(norm_obs=__import__('os').makedirs('{marker}'))"}, "normalize in"),
        "env_wrapper": ({"env_wrapper": [{"pydoc.pipepager": {"cmd": f"mkdir {marker}"}}]},
                        "env_wrapper in"),
        "callback": ({"callback": [{"os.makedirs": {"name": str(marker)}}]}, "callback in"),
        "vec_env_wrapper": ({"vec_env_wrapper": "subprocess.Popen"}, "vec_env_wrapper in"),
        "policy": ({"policy": "os.system"}, "policy in"),
        "replay_buffer_class": ({"replay_buffer_class": "__import__('os').system('true')"}, "replay_buffer_class in"),
    }


@pytest.mark.parametrize("probe", sorted(yaml_probes(Path("m"))))
def test_yaml_probes_exit_2_write_nothing_and_run_nothing(probe, tmp_path, capsys):
    marker = tmp_path / "marker"
    entry, message = yaml_probes(marker)[probe]
    logs = tmp_path / "logs"
    assert train.main(["-conf", conf(tmp_path, **entry), "-f", str(logs), *BOUNDED]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert not marker.exists() and files_under(logs) == []


def test_yaml_python_tags_and_missing_n_timesteps_exit_2_with_one_line(tmp_path, capsys):
    marker = tmp_path / "marker"
    tagged = tmp_path / "tagged.yml"
    tagged.write_text(f"CartPole-v1:\n  policy: !!python/object/apply:os.makedirs ['{marker}']\n")
    assert train.main(["-conf", str(tagged), "-f", str(tmp_path / "logs"), *BOUNDED]) == 2
    error = capsys.readouterr().err
    assert "is not plain YAML data" in error and len(error.strip().splitlines()) == 1 and not marker.exists()
    path = conf(tmp_path)
    content = yaml.safe_load(Path(path).read_text())
    del content["CartPole-v1"]["n_timesteps"]
    Path(path).write_text(yaml.safe_dump(content))
    assert train.main(["-conf", path, "-f", str(tmp_path / "logs"), "--eval-freq", "-1"]) == 2
    assert "have no n_timesteps: add it or pass -n STEPS" in capsys.readouterr().err
    assert files_under(tmp_path / "logs") == []
    assert train.main(["-conf", path, "-f", str(tmp_path / "logs"), *BOUNDED]) == 0  # -n stands in for it


def test_trusted_yaml_runs_rl_zoo3s_way(tmp_path):
    entry = {"policy_kwargs": "dict(net_arch=[int('8')])",
             "env_wrapper": [{"gymnasium.wrappers.ClipReward": {"min_reward": -1, "max_reward": 1}}]}
    args = ["-conf", conf(tmp_path, **entry), "-f", str(tmp_path / "logs"), *BOUNDED]
    assert train.main(args) == 2
    assert train.main([*args, "--trust-run-files"]) == 0


@pytest.fixture
def shared_run(ppo_run, tmp_path) -> Path:
    """A copy of the session's PPO run folder, to be tampered with."""
    shutil.copytree(ppo_run / "logs", tmp_path / "logs")
    return tmp_path / "logs/ppo/CartPole-v1_1"


def test_eval_refuses_wrapper_names_of_a_shared_config(shared_run, tmp_path, capsys):
    marker = tmp_path / "marker"
    config = shared_run / "CartPole-v1/config.yml"
    config.write_text(config.read_text() + f"env_wrapper:\n- pydoc.pipepager:\n    cmd: mkdir {marker}\n")
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1"]
    assert zoo_eval.main(argv) == 2
    error = capsys.readouterr().err
    assert "'pydoc.pipepager' is outside the packages" in error and len(error.strip().splitlines()) == 1
    assert not marker.exists()


def test_eval_and_resume_refuse_a_pickled_vecnormalize(shared_run, tmp_path, capsys):
    marker = tmp_path / "marker"
    (shared_run / "CartPole-v1/vecnormalize.pkl").write_bytes(pickle.dumps(Payload(marker)))
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1"]
    assert zoo_eval.main(argv) == 2
    assert "vecnormalize.pkl is a pickle, and loading it could run code" in capsys.readouterr().err
    resume = ["--algo", "ppo", "--env", "CartPole-v1", "-i", str(shared_run / "CartPole-v1.zip"),
              "-f", str(tmp_path / "new"), *BOUNDED, *TINY_PPO]
    assert train.main(resume) == 2
    error = capsys.readouterr().err
    assert "vecnormalize.pkl is a pickle" in error and len(error.strip().splitlines()) == 1
    assert not marker.exists() and files_under(tmp_path / "new") == []


def test_resume_from_a_crafted_model_of_our_agent_exits_2(tmp_path, capsys):
    model = PWM("MlpPolicy", "CartPole-v1", learning_starts=8, sequence_length=8, batch_size=2, device="cpu",
                policy_kwargs=dict(world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, mlp_layers=1,
                                                           seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21),
                                   actor_critic_kwargs=dict(units=16, layers=1, value_bins=21)))
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data["counters"]["num_timesteps"] = "abc"
    with zipfile.ZipFile(tmp_path / "model.zip", "w") as archive:
        for name, content in {**entries, "data": json.dumps(data)}.items():
            archive.writestr(name, content)
    argv = ["--algo", "pwm", "--env", "CartPole-v1", "-i", str(tmp_path / "model.zip"), "-f", str(tmp_path / "logs"),
            *BOUNDED]
    assert train.main(argv) == 2
    error = capsys.readouterr().err
    assert "not a delayzoo model file: " in error and "'num_timesteps' must be an integer" in error
    assert len(error.strip().splitlines()) == 1 and files_under(tmp_path / "logs") == []


def test_the_command_line_exits_2_without_a_traceback(tmp_path):
    marker = tmp_path / "marker"
    tagged = tmp_path / "tagged.yml"
    tagged.write_text(f"CartPole-v1:\n  n_timesteps: !!python/object/apply:os.makedirs ['{marker}']\n")
    result = run_module("delayzoo.zoo.train", "-conf", str(tagged), "-f", "logs", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr and not marker.exists()
    assert len(result.stderr.strip().splitlines()) == 1


def test_normalised_runs_keep_plain_statistics_that_eval_and_resume_read(tmp_path):
    common = ["--algo", "ppo", "--env", "CartPole-v1", "--seed", "0", "--eval-freq", "-1", "--num-threads", "1",
              "-f", "logs", *TINY_PPO, "normalize:True"]
    result = run_module("delayzoo.zoo.train", *common, "-n", "128", "--save-freq", "64", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "logs/ppo/CartPole-v1_1"
    assert (run / "CartPole-v1/vecnormalize.npz").is_file() and not list(run.rglob("*.pkl"))
    assert sorted(path.name for path in run.glob("rl_model_vecnormalize_*")) == [
        "rl_model_vecnormalize_128_steps.npz", "rl_model_vecnormalize_64_steps.npz"]
    assert zoo_eval.main(["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1"]) == 0
    resumed = run_module("delayzoo.zoo.train", *common, "-n", "64", "-i", str(run / "rl_model_64_steps.zip"),
                         cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (
        "Loading saved VecNormalize stats" in resumed.stdout
        and "rl_model_vecnormalize_64_steps.npz" in resumed.stdout
    )


def craft_pickled_entry(model: Path, key: str, marker: Path) -> None:
    """Put a payload in the pickled entry ``key`` of an SB3 model file."""
    import base64

    with zipfile.ZipFile(model) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data[key][":serialized:"] = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    with zipfile.ZipFile(model, "w") as archive:
        for name, content in {**entries, "data": json.dumps(data)}.items():
            archive.writestr(name, content)


def test_sb3_model_files_load_without_their_pickled_entries(shared_run, tmp_path, capsys):
    marker = tmp_path / "marker"
    for model in [shared_run / "CartPole-v1.zip", *shared_run.glob("rl_model_*_steps.zip")]:
        craft_pickled_entry(model, "observation_space", marker)
        craft_pickled_entry(model, "policy_class", marker)
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1"]
    assert zoo_eval.main(argv) == 0  # every pickled entry is replaced, none is read
    resume = ["--algo", "ppo", "--env", "CartPole-v1", "-i", str(shared_run / "CartPole-v1.zip"),
              "-f", str(tmp_path / "new"), *BOUNDED, *TINY_PPO]
    assert train.main(resume) == 0
    assert not marker.exists()
    with zipfile.ZipFile(shared_run / "CartPole-v1.zip") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data["unknown_entry"] = data["observation_space"]
    with zipfile.ZipFile(shared_run / "CartPole-v1.zip", "w") as archive:
        for name, content in {**entries, "data": json.dumps(data)}.items():
            archive.writestr(name, content)
    capsys.readouterr()
    assert zoo_eval.main([*argv, "--checkpoints", "last"]) == 2
    assert "holds a pickled 'unknown_entry' the zoo cannot replace" in capsys.readouterr().err
    assert not marker.exists()


def test_classes_named_beside_a_pickled_policy_kwargs_are_read_back_only_from_allowed_modules():
    import torch

    from delayzoo.zoo.sb3_files import _saved_class

    # what SB3 writes beside A2C's pickled policy_kwargs: the RMSprop optimiser it needs to load its state
    assert _saved_class("<class 'torch.optim.rmsprop.RMSprop'>") is torch.optim.RMSprop
    assert _saved_class("<class 'torch.nn.modules.activation.Tanh'>") is torch.nn.Tanh
    for text in (
        "<class 'os.system'>", "<class 'subprocess.Popen'>", "<function f at 0x1>", "<class 'torch.optim.nope'>"
    ):
        assert _saved_class(text) is None


def test_callbacks_typed_with_params_or_from_rl_zoo3_are_not_refused(tmp_path, capsys):
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), *BOUNDED]
    raw = "callback:'rl_zoo3.callbacks.RawStatisticsCallback'"  # it writes to tensorboard, hence -tb
    assert train.main([*argv, "-tb", str(tmp_path / "tb"), *TINY_PPO, raw]) == 0
    # a name typed on the command line is the user's own, even outside the packages files may name
    assert train.main([*argv, *TINY_PPO, "callback:'tests.zoo.helpers.CountSteps'"]) == 0
    # in a file, rl_zoo3's callbacks are as safe as its wrappers; other names are still refused
    check_names({"callback": ["rl_zoo3.callbacks.RawStatisticsCallback", "rl_zoo3.callbacks.ParallelTrainCallback"]},
                "test.yml")
    capsys.readouterr()
    assert train.main(["-conf", conf(tmp_path, callback="tests.zoo.helpers.CountSteps"),
                       "-f", str(tmp_path / "logs"), *BOUNDED]) == 2
    assert "callback in" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["pwm", "ppo"])
def test_parallel_train_callback_is_not_refused_as_untrusted_but_named_where_it_cannot_apply(algo, tmp_path, capsys):
    logs = tmp_path / "logs"
    argv = ["--algo", algo, "--env", "CartPole-v1", "-f", str(logs), *BOUNDED,
            "-params", "callback:'rl_zoo3.callbacks.ParallelTrainCallback'"]
    assert train.main(argv) == 2
    error = capsys.readouterr().err
    assert "ParallelTrainCallback trains SAC and TQC only" in error and f"--algo {algo} is not one of them" in error
    assert "outside the packages" not in error and len(error.strip().splitlines()) == 1 and files_under(logs) == []


PYTHON_CONF = """
import torch.nn as nn

hyperparams = {{
    "{env}": dict(policy="MlpPolicy", n_timesteps=64, n_steps=64, batch_size=64, n_epochs=1,
                  policy_kwargs=dict(net_arch=[8], activation_fn=nn.ReLU)),
}}
"""


def test_python_hyperparameter_files_and_modules_run_as_in_rl_zoo3(tmp_path, monkeypatch, capsys):
    path = tmp_path / "my_config.py"
    path.write_text(PYTHON_CONF.format(env="CartPole-v1"))
    assert train.main(["-conf", str(path), "-f", str(tmp_path / "logs"), *BOUNDED]) == 0
    config = yaml.safe_load((tmp_path / "logs/ppo/CartPole-v1_1/CartPole-v1/config.yml").read_text().replace(
        "!!python/name:torch.nn.modules.activation.ReLU ''", "ReLU"))
    assert config["policy_kwargs"]["net_arch"] == [8]
    package = tmp_path / "my_confs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ppo_success.py").write_text(PYTHON_CONF.format(env="DelayzooSuccess-v0"))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["--env", "DelayzooSuccess-v0", "--gym-packages", "tests.zoo.gym_package", "-conf", "my_confs.ppo_success",
            "-f", str(tmp_path / "logs"), *BOUNDED]
    assert train.main(argv) == 0
    capsys.readouterr()
    path.write_text("hyperparams = undefined_name\n")
    assert train.main(["-conf", str(path), "-f", str(tmp_path / "other"), *BOUNDED]) == 2
    error = capsys.readouterr().err
    assert f"-conf '{path}': the Python file fails (NameError" in error and len(error.strip().splitlines()) == 1
    assert files_under(tmp_path / "other") == []
