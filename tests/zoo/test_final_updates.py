"""The Atari entry's ``final_updates`` follow the run: scaled with ``-n`` by the run's total planned steps,
none when the run makes no update, kept when set with ``-params``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

from delayzoo.zoo import train
from tests.zoo.test_atari_entries import TINY

TINY_DEZ = [item for item in TINY["delayed_ez"] if not item.startswith("final_updates")]
ENTRY_FINAL, ENTRY_STEPS = 22000, 100_000


def _train(folder: Path, steps: int, *extra: str, resume: Path | None = None) -> Path:
    threads = torch.get_num_threads()
    more = ["-i", str(resume)] if resume else ["--save-replay-buffer"]
    try:
        code = train.main(
            ["--algo", "delayed_ez", "--env", "ALE/Pong-v5", "-n", str(steps), "--seed", "0", "--eval-freq", "-1",
             "--num-threads", "1", "-f", str(folder), *more, "-params", *TINY_DEZ, *extra]
        )
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return sorted((folder / "delayed_ez").glob("ALE-Pong-v5_*"))[-1]


def _final_updates_recorded(run: Path) -> int:
    lines = (run / "ALE-Pong-v5" / "config.yml").read_text().splitlines()  # text: tuples in policy_kwargs
    return int(next(line for line in lines if line.startswith("final_updates: ")).split(": ")[1])


def _updates(run: Path) -> int:
    with zipfile.ZipFile(run / "ALE-Pong-v5.zip") as archive:
        return int(json.loads(archive.read("data"))["counters"]["_n_updates"])


def test_final_updates_scale_with_the_planned_steps_of_the_run_and_its_resume(tmp_path, capsys):
    run = _train(tmp_path, 16)
    scaled = round(ENTRY_FINAL * 16 / ENTRY_STEPS)
    assert _final_updates_recorded(run) == scaled == 4
    assert _updates(run) == (16 - 8) + scaled
    assert "final_updates: 4 (the entry's 22000 for its 100,000 steps" in capsys.readouterr().out
    resumed = _train(tmp_path, 16, resume=run / "ALE-Pong-v5.zip")
    assert _final_updates_recorded(resumed) == round(ENTRY_FINAL * 32 / ENTRY_STEPS) == 7
    assert _updates(resumed) == _updates(run) + 16 + 7


def test_no_final_updates_when_the_run_makes_no_update(tmp_path):
    with pytest.warns(UserWarning, match="makes no update"):
        run = _train(tmp_path, 16, "learning_starts:1000000")
    assert _updates(run) == 0


def test_final_updates_set_with_params_are_kept(tmp_path):
    run = _train(tmp_path, 16, "final_updates:3")
    assert _final_updates_recorded(run) == 3 and _updates(run) == (16 - 8) + 3
