"""A short zoo run's evaluation CSV, pinned: DelayedEZ (a tiny model) trained by the zoo's train under a random-walk
delay with the pending view, then every checkpoint evaluated by its eval, gives the returns of
``pinned/delayed_ez_eval.csv`` (taken from the code of the commit that added it). Rearranging the zoo or the
agent must not change them; a change meant to alter training takes them again (``DELAYZOO_PIN=write``)."""

from __future__ import annotations

import os
import pathlib

from tests.zoo.helpers import run_module

PINNED = pathlib.Path(__file__).with_name("pinned") / "delayed_ez_eval.csv"
TINY = """CartPole-v1:
  policy: MlpPolicy
  n_timesteps: 192
  n_envs: 2
  learning_starts: 64
  batch_size: 16
  num_simulations: 4
  num_unroll_steps: 3
  td_steps: 3
  reanalyze_ratio: 0.5
  target_update_interval: 10
  lr_warmup_steps: 10
  learning_rate: 0.01
  gamma: 0.97
  search_kwargs: {q_normalization: parent_siblings}
  prefetch: 'process'
  policy_kwargs: "dict(net_kwargs=dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8,
    proj_out=8, pred_hidden=4, support_size=10, hidden_norm='layer'), optimizer_class=th.optim.Adam)"
"""


def test_a_short_zoo_run_evaluates_as_pinned(tmp_path):
    (tmp_path / "tiny.yml").write_text(TINY)
    train = run_module(
        "delayzoo.zoo.train", "--algo", "delayed_ez", "--env", "CartPole-v1", "-conf", "tiny.yml", "--seed", "0",
        "--delay", "2", "--delay-process", "random-walk", "--init-action", "random", "--pending-view",
        "--eval-freq", "-1", "--save-freq", "48", "--num-threads", "1", "-f", "logs", cwd=tmp_path, timeout=300,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    output = tmp_path / "eval.csv"
    evaluate = run_module(
        "delayzoo.zoo.eval", "--algo", "delayed_ez", "--env", "CartPole-v1", "-f", "logs", "-n", "4", "--n-envs", "2",
        "--device", "cpu", "-o", str(output), cwd=tmp_path, timeout=300,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    if os.environ.get("DELAYZOO_PIN") == "write":
        PINNED.write_text(output.read_text())
    assert output.read_text() == PINNED.read_text()
