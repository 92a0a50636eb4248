"""``benchmarks/pwm_update.py``: the models ``--size`` names come from ``pwm.yml``; ``--compile`` options."""

from __future__ import annotations

import subprocess
import sys

import yaml

from delayzoo.zoo.trust import parse_kwargs
from tests.benchmarks.scripts import REPO, load_script


def test_sizes_are_the_models_of_their_pwm_yml_entries():
    script = load_script("pwm_update")
    entries = yaml.safe_load((REPO / "delayzoo" / "hyperparams" / "pwm.yml").read_text())
    for size, entry in (("cartpole", "CartPole-v1@benchmark"), ("minatar", "MinAtar/Breakout-v1")):
        kwargs = parse_kwargs(entries[entry]["policy_kwargs"], entry)
        assert script.model_size(size) == {
            "world_model_kwargs": kwargs["world_model_kwargs"],
            "actor_critic_kwargs": kwargs["actor_critic_kwargs"],
        }
    assert script.model_size("paper") == {}
    assert script.SIZE_ENVS == {"cartpole": "CartPole-v1", "minatar": "MinAtar/Breakout-v1"}


def test_compile_both_is_refused_beside_a_baseline():
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pwm_update.py"), "--size", "cartpole", "--compile", "both",
         "--baseline", "HEAD"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "--baseline measures one version of this tree: --compile on or off" in result.stderr
