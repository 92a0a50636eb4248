"""Learning curves of zoo runs (PNG) and the Atari 100k summary table (markdown).

::

    python -m delayzoo.zoo.plot -f logs                      # every env under logs/
    python -m delayzoo.zoo.plot -f logs --algos pwm ppo --envs ALE/Pong-v5 --source eval

One PNG per env, ``<output dir>/<env>.png``: one curve per algorithm and delay setting, the mean over
its runs (seeds) with the min-max band shaded. ``--source monitor`` (default) plots training episodes
(a running mean over ``--window`` episodes); ``--source eval`` the per-checkpoint means of
``delayzoo.zoo.eval``'s CSVs.

When evaluated Atari 100k runs exist, ``<output dir>/atari100k.md`` holds, per algorithm and delay
setting, the mean, median and IQM of the human-normalised scores of the final models with 95%
stratified-bootstrap intervals, and the raw score of each game.

``--by-delay`` draws instead the final return against the delay value (a sweep's study, see
:mod:`delayzoo.zoo.sweep`): one PNG per env, ``<output dir>/<env>-by-delay.png``, with one line per
agent (a grid file's variant, or the algorithm with its delay process and pending view; colours by
algorithm, delay-aware agents solid, delay-oblivious ones dashed), the mean over its evaluated runs
(seeds) of the final return, the mean eval return of the last ``--last`` (3) evaluated models, with 95%
percentile-bootstrap intervals over the runs; and the same numbers as markdown tables in
``<output dir>/by-delay.md``, with the fraction of its delay-0 return each agent keeps. A run without
delay counts as delay 0. Beside them, ``<env>-curves.png``: the learning curves (eval return against env
steps, log scale), one panel per delay and one line per agent, the mean over its runs (each run's curve
interpolated between its own checkpoints, so that runs resumed at other steps line up by step value)
with the min-max band where at least two runs have data.

``--at-steps ENV=N`` (repeatable) compares the agents at an equal budget: ``<env>-at-<N>-steps.png`` and
``at-steps.md`` hold the same figure and tables with each run's evaluation at exactly ``N`` env steps
instead of its final return; a run without that checkpoint is named (a warning, and a line under the
table), never left out silently. ``--grid FILE`` keeps the cells of a grid file only (its envs, agents
and per-env seeds) and takes its envs' ``budget:`` as ``--at-steps``. Random play (``random-play.csv`` in
the log folder, from :mod:`delayzoo.zoo.random_play`) is drawn as a grey dotted reference line and is a
row of the tables. Legends go below the axes. The same runs give the same tables, byte for byte, and the
same PNGs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from delayzoo.zoo.delay_settings import TRACE
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.grid import CELL_RECORD, load_grid, read_cell_record
from delayzoo.zoo.random_play import read_random_play
from delayzoo.zoo.runs import Run, find_runs, read_monitor
from delayzoo.zoo.scores import AGGREGATES, atari_game, bootstrap_interval, human_normalized, reference_scores

__all__ = [
    "DelayLine",
    "atari_table",
    "delay_results",
    "delay_table",
    "final_return",
    "kept",
    "learning_curve",
    "main",
    "missing_at",
    "parse_at_steps",
    "plot_by_delay",
    "plot_curves",
    "plot_env",
    "return_at",
]


def _read_eval(run: Run) -> tuple[np.ndarray, np.ndarray]:
    path = run.eval_csv
    if not path.is_file():
        return np.zeros(0), np.zeros(0)
    with open(path, newline="") as handle:
        rows = [[float(value) for value in row] for row in list(csv.reader(handle))[1:] if row]
    if not rows:
        return np.zeros(0), np.zeros(0)
    return np.array([row[0] for row in rows]), np.array([np.mean(row[1:]) for row in rows])


def learning_curve(run: Run, source: str = "monitor", window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, score)`` of one run: a running mean of training episodes, or the eval CSV's means."""
    if source == "eval":
        return _read_eval(run)
    steps, returns = read_monitor(run)
    if returns.size == 0:
        return steps, returns
    cumulative = np.concatenate([[0.0], np.cumsum(returns)])
    counts = np.minimum(np.arange(1, returns.size + 1), window)
    ends = np.arange(1, returns.size + 1)
    return steps, (cumulative[ends] - cumulative[ends - counts]) / counts


def _on_grid(curves: list[tuple[np.ndarray, np.ndarray]], points: int) -> tuple[np.ndarray, np.ndarray]:
    """Curves interpolated on a common grid from the first to the last step all of them cover."""
    start = max(steps[0] for steps, _ in curves)
    stop = min(steps[-1] for steps, _ in curves)
    grid = np.linspace(start, stop, points) if stop > start else np.array([stop])
    return grid, np.stack([np.interp(grid, steps, values) for steps, values in curves])


def plot_env(runs: list[Run], path: Path, source: str = "monitor", window: int = 10, points: int = 100) -> Path | None:
    """Write the PNG of one env's runs; ``None`` when no run has data for ``source``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for run in runs:
        steps, values = learning_curve(run, source, window)
        if steps.size:
            groups[f"{run.algo} ({run.delay_settings().label()})"].append((steps, values))
    if not groups:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, curves in sorted(groups.items()):
        grid, values = _on_grid(curves, points)
        mean = values.mean(axis=0)
        (line,) = axes.plot(grid, mean, marker="o" if grid.size == 1 else None, label=f"{label}, {len(curves)} run(s)")
        axes.fill_between(grid, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    axes.set_title(runs[0].env_id)
    axes.set_xlabel("environment steps")
    axes.set_ylabel("evaluation return" if source == "eval" else f"training return (mean of {window} episodes)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def resampling_order(runs: list[Run]) -> list[Run]:
    """The runs by seed, then by folder: the order in which their scores are bootstrapped, so that an interval
    depends only on the committed files (:func:`~delayzoo.zoo.runs.find_runs` orders runs that share an id by
    the time of their ``args.yml``, which a checkout does not keep)."""

    def key(run: Run) -> tuple[int, str]:
        seed = run.args.get("seed")
        number = seed if isinstance(seed, int) and not isinstance(seed, bool) else -1
        return number, f"{_folder(run).name}/{run.name}"

    return sorted(runs, key=key)


def atari_table(runs: list[Run], n_resamples: int = 2000, seed: int = 0) -> str | None:
    """The Atari 100k markdown summary of the evaluated runs' final models; ``None`` without any."""
    finals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in resampling_order(runs):
        game = atari_game(run.env_id)
        steps, means = _read_eval(run)
        if game is not None and steps.size:
            finals[f"{run.algo} ({run.delay_settings().label()})"][game].append(float(means[np.argmax(steps)]))
    if not finals:
        return None
    lines = [
        "| agent | games | runs | mean HNS [95% CI] | median HNS [95% CI] | IQM HNS [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for label, per_game in sorted(finals.items()):
        normalized = {game: np.asarray(human_normalized(game, np.asarray(scores))) for game, scores in per_game.items()}
        cells = []
        for metric in AGGREGATES.values():
            estimate, low, high = bootstrap_interval(normalized, metric, n_resamples, seed=seed)
            cells.append(f"{estimate:.3f} [{low:.3f}, {high:.3f}]")
        runs_count = sum(len(scores) for scores in per_game.values())
        lines.append(f"| {label} | {len(per_game)}/26 | {runs_count} | " + " | ".join(cells) + " |")
    labels = sorted(finals)
    lines += ["", "| game | random | human | " + " | ".join(labels) + " |", "|---|---|---|" + "---|" * len(labels)]
    for game, (random, human) in sorted(reference_scores().items()):
        scores = [finals[label].get(game) for label in labels]
        if any(scores):
            cells = [f"{np.mean(s):.1f}" if s else "" for s in scores]
            lines.append(f"| {game} | {random:g} | {human:g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "HNS: human-normalised score (score - random) / (human - random) of the final model, mean over the "
        "evaluation episodes; intervals: stratified percentile bootstrap over each game's runs "
        f"({n_resamples} resamples; a game with one run contributes no spread).",
    ]
    return "\n".join(lines) + "\n"


def final_return(run: Run, last: int = 1) -> float | None:
    """The mean eval return of the run's ``last`` most trained models (the last rows of its eval CSV, by
    steps); ``None`` when it is not evaluated."""
    steps, means = _read_eval(run)
    return float(means[np.argsort(steps, kind="stable")[-last:]].mean()) if steps.size else None


def return_at(run: Run, steps: int) -> float | None:
    """The mean eval return of the run's model at exactly ``steps`` env steps; ``None`` without that evaluation."""
    evaluated, means = _read_eval(run)
    found = np.flatnonzero(evaluated == steps)
    return float(means[found[0]]) if found.size else None


def _folder(run: Run) -> Path:
    """The folder that names a run: its sweep cell (with a cell record), else the run folder."""
    cell = run.path.parents[1]
    return cell if (cell / CELL_RECORD).is_file() else run.path


def missing_at(runs: list[Run], budgets: Mapping[str, int]) -> dict[str, list[Path]]:
    """``{env id: cell folders}`` of the cells on the envs of ``budgets`` of which no run has an evaluation at
    the env's budget (not evaluated, or no checkpoint at exactly that step). A cell resumed after an
    interruption holds several runs, of which the last is evaluated; a run outside a sweep is its own cell."""
    found: dict[tuple[str, Path], bool] = {}
    for run in runs:
        if run.env_id in budgets:
            key = (run.env_id, _folder(run))
            found[key] = found.get(key, False) or return_at(run, budgets[run.env_id]) is not None
    missing: dict[str, list[Path]] = defaultdict(list)
    for (env_id, folder), evaluated in sorted(found.items()):
        if not evaluated:
            missing[env_id].append(folder)
    return dict(missing)


def parse_at_steps(values: Sequence[str]) -> dict[str, int]:
    """``{env id: env steps}`` of ``--at-steps ENV=N`` values.

    :raise ZooError: naming a value without ``=``, one whose steps are not an integer >= 1, or an env given
        twice with different steps
    """
    budgets: dict[str, int] = {}
    for value in values:
        env_id, equals, steps = value.rpartition("=")
        if not equals or not env_id:
            raise ZooError(f"--at-steps {value!r}: expected ENV=N (an env id, '=', env steps), e.g. CartPole-v1=20000")
        try:
            number = int(steps)
        except ValueError:
            raise ZooError(f"--at-steps {value!r}: {steps!r} is not an integer number of env steps") from None
        if number < 1:
            raise ZooError(f"--at-steps {value!r}: the env steps must be >= 1, got {number}")
        if budgets.get(env_id, number) != number:
            raise ZooError(f"--at-steps gives {env_id} two budgets: {budgets[env_id]} and {number}")
        budgets[env_id] = number
    return budgets


@dataclasses.dataclass
class DelayLine:
    """One line of a by-delay figure: an agent's returns (one per run) at each delay.

    :param label: the agent (a sweep variant's label, or the algorithm and delay setting)
    :param family: the algorithm, which gives the line its colour
    :param aware: the agent uses the pending actions (solid line) or not (dashed)
    :param points: delay -> return of each run
    """

    label: str
    family: str
    aware: bool
    points: dict[int, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))


def _delay_line(run: Run) -> tuple[int, str, bool, bool]:
    """The delay value of a run, the label of its line, whether it is drawn as delay-aware, and whether it is
    a grid file's delay-0 cell (drawn on every line of its algorithm).

    A run made by a sweep from a grid file has its cell's record (:data:`~delayzoo.zoo.grid.CELL_RECORD`):
    its line is the cell's agent, marked ``(obs delay)`` when the cell's delay is an observation delay.
    Other runs: the algorithm and the delay setting but the value (the execution delay's; the observation
    delay's, marked ``obs-delay``, for a run without execution delay), a run without delay at delay 0.
    """
    record = read_cell_record(run.path.parents[1])
    if record.get("label"):
        delay, label = int(record["delay"]), str(record["label"])
        shared = delay == 0 and label == run.algo
        if record.get("delay_kind", "execution") == "observation" and not shared:
            label += " (obs delay)"
        return delay, label, bool(record["delay_aware"]), shared
    settings = run.delay_settings().resolved()
    if not settings.delayed:
        return 0, run.algo, False, False
    execution, observation = settings.execution, settings.observation
    shown = execution if execution.given else observation  # the delay on the x axis
    if shown.process == "random-walk":
        variant = f" (random-walk from {shown.min_delay}, p={shown.p:g})"
    elif shown.process == "iid":
        variant = f" (iid from {shown.min_delay})"
    elif shown.process == TRACE:
        variant = f" (trace {Path(str(shown.trace)).name})"
    else:
        variant = ""
    if shown is observation:
        variant = " obs-delay" + variant
    elif observation.given:
        variant += f" ({observation.label()})"
    label = run.algo + variant + (" +view" if settings.pending_view else "")
    return shown.delay or 0, label, settings.pending_view, False


def delay_results(
    runs: list[Run], last: int = 3, budgets: Mapping[str, int] | None = None
) -> dict[str, dict[str, DelayLine]]:
    """``{env id: {line label: DelayLine}}`` of the evaluated runs: their final return (the mean of the last
    ``last`` evaluations), or with ``budgets`` their evaluation at their env's budget (runs of other envs
    and runs without that evaluation left out: :func:`missing_at` names them).

    A grid file's delay-0 cell of an algorithm is the delay-0 point of every line of that algorithm on that
    env (at delay 0 the modes of an algorithm are one agent).
    """
    results: dict[str, dict[str, DelayLine]] = defaultdict(dict)
    shared: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in resampling_order(runs):
        if budgets is None:
            score = final_return(run, last)
        else:
            score = return_at(run, budgets[run.env_id]) if run.env_id in budgets else None
        if score is None:
            continue
        delay, label, aware, shared_cell = _delay_line(run)
        if shared_cell:
            shared[(run.env_id, run.algo)].append(score)
            continue
        line = results[run.env_id].setdefault(label, DelayLine(label, run.algo, aware))
        line.points[delay].append(score)
    for (env_id, algo), scores in shared.items():
        lines = [line for line in results[env_id].values() if line.family == algo]
        for line in lines or [results[env_id].setdefault(algo, DelayLine(algo, algo, True))]:
            line.points[0].extend(scores)
    return results


def _mean_interval(scores: list[float], n_resamples: int, seed: int) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean over runs with its 95% percentile-bootstrap interval."""
    return bootstrap_interval({"runs": scores}, lambda groups: float(np.mean(groups["runs"])), n_resamples, seed=seed)


_MARKERS = ("o", "s", "^", "D", "v", "P")
_RANDOM_STYLE: dict[str, Any] = {"color": "grey", "linestyle": ":", "label": "random play"}


def _styles(kinds: Mapping[str, tuple[str, bool]]) -> dict[str, dict[str, Any]]:
    """The colour (by family), marker (by order within the family) and line style (solid: delay-aware) of
    each line, from ``{label: (family, aware)}``: one agent looks the same in every figure of an env."""
    from matplotlib import pyplot as plt

    families = sorted({family for family, _ in kinds.values()})
    colours = {family: plt.get_cmap("tab10")(index % 10) for index, family in enumerate(families)}
    seen: dict[str, int] = defaultdict(int)
    styles = {}
    for label, (family, aware) in sorted(kinds.items()):
        marker = _MARKERS[seen[family] % len(_MARKERS)]
        seen[family] += 1
        styles[label] = {"color": colours[family], "marker": marker, "linestyle": "-" if aware else "--"}
    return styles


def _save(figure: Any, path: Path) -> Path:
    """Write a figure as a PNG without the matplotlib version (the same data give the same file) and close it."""
    from matplotlib import pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(figure)
    return path


def plot_by_delay(
    env_id: str,
    lines: dict[str, DelayLine],
    path: Path,
    n_resamples: int = 2000,
    seed: int = 0,
    last: int = 3,
    budget: int | None = None,
    random: Mapping[int, list[float]] | None = None,
) -> Path:
    """Write the PNG of return against delay for one env (``lines`` from :func:`delay_results`, final
    returns or with ``budget`` the returns at that many env steps): colours by family, delay-aware agents
    solid and delay-oblivious ones dashed, 95% bootstrap intervals, random play dotted, the legend below."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    styles = _styles({label: (line.family, line.aware) for label, line in lines.items()})
    figure, axes = plt.subplots(figsize=(7, 6), layout="constrained")
    spread = 0.06 * max((max(line.points) for line in lines.values()), default=1)  # side by side, not on top
    for index, (label, line) in enumerate(sorted(lines.items())):
        delays = sorted(line.points)
        shift = spread * (index - (len(lines) - 1) / 2) / max(len(lines), 1)
        stats = np.array([_mean_interval(line.points[delay], n_resamples, seed) for delay in delays])
        runs = sorted({len(line.points[delay]) for delay in delays})
        counts = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
        error = [stats[:, 0] - stats[:, 1], stats[:, 2] - stats[:, 0]]
        axes.errorbar(
            np.array(delays) + shift,
            stats[:, 0],
            yerr=error,
            capsize=4,
            label=f"{label} ({counts} run(s) per point)",
            **styles[label],
        )
    if random:
        axes.plot(sorted(random), [np.mean(random[delay]) for delay in sorted(random)], marker=".", **_RANDOM_STYLE)
    what = "final return" if budget is None else f"return at {budget} env steps"
    axes.set_title(f"{env_id}: {what} against delay")
    axes.set_xlabel("maximum delay (steps)")
    last_ones = f" (mean of the last {last} evaluations)" if last > 1 and budget is None else ""
    axes.set_ylabel(what + last_ones)
    axes.set_xticks(sorted({delay for line in lines.values() for delay in line.points}))
    axes.grid(alpha=0.3)
    figure.legend(loc="outside lower center", ncol=2, fontsize="small")
    return _save(figure, path)


def _mean_band(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """``(steps, mean, low, high)`` of runs' curves on the union of their steps: each run interpolated
    between its own first and last checkpoints (runs resumed at other steps line up by step value), the
    mean over the runs with data at a step, and the min and max where at least two runs have data (NaN
    elsewhere)."""
    steps = np.unique(np.concatenate([run_steps for run_steps, _ in curves]))
    values = np.stack(
        [
            np.where((steps >= run_steps[0]) & (steps <= run_steps[-1]), np.interp(steps, run_steps, means), np.nan)
            for run_steps, means in curves
        ]
    )
    band = np.sum(~np.isnan(values), axis=0) >= 2
    low = np.where(band, np.nanmin(values, axis=0), np.nan)
    return steps, np.nanmean(values, axis=0), low, np.where(band, np.nanmax(values, axis=0), np.nan)


def plot_curves(
    env_id: str,
    runs: list[Run],
    path: Path,
    budget: int | None = None,
    random: Mapping[int, list[float]] | None = None,
) -> Path | None:
    """Write the learning curves of one env's evaluated runs: eval return against env steps (log scale),
    one panel per delay, one line per agent (the mean over its runs, each interpolated between its own
    checkpoints, with the min-max band where two runs have data), random play and the
    ``budget`` as reference lines, the legend below; ``None`` without evaluated runs."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    panels: dict[int, dict[str, list[tuple[np.ndarray, np.ndarray]]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[str, tuple[str, bool]] = {}
    for run in runs:
        steps, means = _read_eval(run)
        if steps.size:
            delay, label, aware, _ = _delay_line(run)
            order = np.argsort(steps, kind="stable")
            panels[delay][label].append((steps[order], means[order]))
            kinds[label] = (run.algo, aware)
    if not panels:
        return None
    styles = _styles(kinds)
    delays = sorted(panels)
    figure, grid = plt.subplots(
        1, len(delays), figsize=(3.2 * len(delays) + 1, 5), sharey=True, squeeze=False, layout="constrained"
    )
    for axes, delay in zip(grid[0], delays):
        for label, curves in sorted(panels[delay].items()):
            steps, mean, low, high = _mean_band(curves)
            axes.plot(steps, mean, markersize=3, label=f"{label} (runs: {len(curves)})", **styles[label])
            axes.fill_between(steps, low, high, color=styles[label]["color"], alpha=0.15, linewidth=0)
        if random and delay in random:
            axes.axhline(float(np.mean(random[delay])), **_RANDOM_STYLE)
        if budget is not None:
            axes.axvline(budget, color="black", linewidth=0.8, alpha=0.5, label=f"budget: {budget} env steps")
        axes.set_xscale("log")
        axes.set_title(f"maximum delay {delay}")
        axes.set_xlabel("env steps")
        axes.grid(alpha=0.3)
    grid[0][0].set_ylabel("eval return (mean over runs, min-max band)")
    figure.suptitle(f"{env_id}: learning curves")
    legend: dict[str, Any] = {}
    for axes in grid[0]:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = sorted(legend, key=lambda label: (label == _RANDOM_STYLE["label"] or label.startswith("budget"), label))
    figure.legend([legend[label] for label in labels], labels, loc="outside lower center", ncol=3, fontsize="small")
    return _save(figure, path)


KEPT_DEFINITION = (
    "Kept: (R_d - R_random,d) / (R_0 - R_random,0), where R_d is the agent's mean return at that delay, R_0 at "
    "delay 0 (its own, or its algorithm's delay-0 run) and R_random random play's at the same delays: 0% is random "
    "play, 100% the agent's undelayed return, for positive and negative returns alike; n/a where the agent's "
    "undelayed return is not above random play's."
)
"""What the "kept" columns mean, written under each of their tables."""

KEPT_WITHOUT_RANDOM_PLAY = (
    "Kept needs random play's returns at each delay (random-play.csv beside the cells, from python -m "
    "delayzoo.zoo.random_play -f <log folder>); without them the cells are empty."
)


def kept(agent_delayed: float, agent_undelayed: float, random_delayed: float, random_undelayed: float) -> float | None:
    """The share of its undelayed margin over random play an agent keeps at a delay:
    ``(R_d - R_random,d) / (R_0 - R_random,0)``; ``None`` when the undelayed agent is not above random play."""
    margin = agent_undelayed - random_undelayed
    if not margin > 0:
        return None
    return (agent_delayed - random_delayed) / margin


def _kept_cell(means: Mapping[int, float], random_means: Mapping[int, float], delay: int) -> str:
    if delay not in means or 0 not in means or delay not in random_means or 0 not in random_means:
        return ""
    share = kept(means[delay], means[0], random_means[delay], random_means[0])
    return "n/a" if share is None else f"{share:.0%}"


def delay_table(
    runs: list[Run],
    n_resamples: int = 2000,
    seed: int = 0,
    last: int = 3,
    budgets: Mapping[str, int] | None = None,
    random: Mapping[str, Mapping[int, list[float]]] | None = None,
) -> str | None:
    """Markdown tables of return against delay (final return, or with ``budgets`` the return at each env's
    budget), with random play as a row, and of the share of its undelayed margin over random play each agent
    keeps (:func:`kept`), one pair per env; with ``budgets``, the cells without an evaluation at the budget
    named under each env's tables.
    ``None`` without any run to show."""
    results = delay_results(runs, last, budgets)
    missing = missing_at(runs, budgets) if budgets is not None else {}
    if not results and not missing:
        return None
    random = random or {}
    lines = []
    for env_id in sorted(set(results) | set(missing)):
        by_label = results.get(env_id, {})
        delays = sorted({delay for line in by_label.values() for delay in line.points})
        heading = f"### {env_id}" if budgets is None else f"### {env_id} at {budgets[env_id]} env steps"
        lines += [heading, ""]
        if by_label:
            lines += ["| agent | " + " | ".join(f"delay {delay}" for delay in delays) + " |"]
            lines.append("|---|" + "---|" * len(delays))
        means: dict[str, dict[int, float]] = defaultdict(dict)
        for label, line in sorted(by_label.items()):
            cells = []
            for delay in delays:
                if delay in line.points:
                    mean, low, high = _mean_interval(line.points[delay], n_resamples, seed)
                    means[label][delay] = mean
                    cells.append(f"{mean:.1f} [{low:.1f}, {high:.1f}] ({len(line.points[delay])})")
                else:
                    cells.append("")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        played = random.get(env_id, {})
        if by_label and played:
            cells = [f"{np.mean(played[delay]):.1f}" if delay in played else "" for delay in delays]
            lines.append("| random play | " + " | ".join(cells) + " |")
        delayed = [delay for delay in delays if delay > 0]
        if 0 in delays and delayed:
            lines += ["", "| agent | " + " | ".join(f"kept at {delay}" for delay in delayed) + " |"]
            lines.append("|---|" + "---|" * len(delayed))
            random_means = {delay: float(np.mean(scores)) for delay, scores in played.items()}
            for label in sorted(by_label):
                cells = [_kept_cell(means[label], random_means, delay) for delay in delayed]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
            lines += ["", KEPT_DEFINITION if played else KEPT_WITHOUT_RANDOM_PLAY]
        if budgets is not None:
            names = ", ".join(sorted(folder.name for folder in missing.get(env_id, []))) or "none"
            lines += ["", f"Cells without an evaluation at {budgets[env_id]} env steps (not in the table): {names}."]
        lines.append("")
    if budgets is None:
        what = "each run's final model" if last == 1 else f"each run's last {last} evaluated models"
        lines.append(f"Final return: the mean eval return of {what} (mean over its eval episodes), ")
    else:
        lines.append(
            "Return at the budget: the mean eval return of each run's model at exactly that many env steps "
            "(mean over its eval episodes), "
        )
    lines[-1] += (
        f"mean over runs (seeds) [95% percentile bootstrap over runs, {n_resamples} resamples] (number of runs)."
    )
    if random:
        lines[-1] += " Random play: uniformly random actions, evaluated as the agents are (mean over its episodes)."
    return "\n".join(lines) + "\n"


def _stem(env_id: str) -> str:
    """An env id as a file name (``MinAtar/Breakout-v1`` -> ``MinAtar-Breakout-v1``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", env_id)


def _write_by_delay(
    runs: list[Run],
    output: Path,
    n_resamples: int,
    seed: int,
    last: int,
    budgets: Mapping[str, int],
    random: Mapping[str, Mapping[int, list[float]]],
) -> None:
    table = delay_table(runs, n_resamples, seed, last, random=random)
    if table is None:
        raise ZooError("--by-delay needs evaluated runs: none of these runs has an eval CSV (run delayzoo.zoo.eval)")
    for env_id, lines in sorted(delay_results(runs, last).items()):
        png = output / f"{_stem(env_id)}-by-delay.png"
        print(f"Wrote {plot_by_delay(env_id, lines, png, n_resamples, seed, last, random=random.get(env_id))}")
        env_runs = [run for run in runs if run.env_id == env_id]
        png = output / f"{_stem(env_id)}-curves.png"
        print(f"Wrote {plot_curves(env_id, env_runs, png, budgets.get(env_id), random.get(env_id))}")
    (output / "by-delay.md").write_text(table)
    print(table)
    print(f"Wrote {output / 'by-delay.md'}")
    if not budgets:
        return
    for env_id, folders in sorted(missing_at(runs, budgets).items()):
        for folder in folders:
            print(f"warning: {folder} has no evaluation at {budgets[env_id]} env steps", file=sys.stderr)
    for env_id, lines in sorted(delay_results(runs, last, budgets).items()):
        png = output / f"{_stem(env_id)}-at-{budgets[env_id]}-steps.png"
        at = plot_by_delay(env_id, lines, png, n_resamples, seed, last, budgets[env_id], random.get(env_id))
        print(f"Wrote {at}")
    at_table = delay_table(runs, n_resamples, seed, last, budgets, random)
    if at_table is not None:
        (output / "at-steps.md").write_text(at_table)
        print(at_table)
        print(f"Wrote {output / 'at-steps.md'}")


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of ``delayzoo plot``."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--log-folder", default="logs", help="log folder of the zoo (default: logs)")
    parser.add_argument("--algos", nargs="+", help="only these algorithms")
    parser.add_argument("--envs", nargs="+", help="only these env ids")
    parser.add_argument(
        "--source", choices=("monitor", "eval"), default="monitor", help="training episodes or the eval CSVs"
    )
    parser.add_argument("--window", type=int, default=10, help="episodes in the running mean (monitor source)")
    parser.add_argument("--points", type=int, default=100, help="points per curve")
    parser.add_argument("-o", "--output-dir", type=Path, help="where to write (default <log folder>/plots)")
    parser.add_argument(
        "--by-delay", action="store_true", help="final return against delay per algorithm (PNG and markdown table)"
    )
    parser.add_argument(
        "--last",
        type=int,
        default=3,
        help="--by-delay: a run's final return is the mean of its last LAST evaluations (default 3)",
    )
    parser.add_argument(
        "--at-steps",
        action="append",
        default=[],
        metavar="ENV=N",
        help="--by-delay: also compare the agents on ENV at their evaluation at exactly N env steps (repeatable)",
    )
    parser.add_argument(
        "--grid",
        type=Path,
        metavar="FILE",
        help="--by-delay: only the cells of this grid file (its envs, agents and seeds), at its envs' budget:",
    )
    parser.add_argument("--n-bootstrap", type=int, default=2000, help="bootstrap resamples of the intervals")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.plot") -> int:
    """Run the plot command line; return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    return run_command(prog, lambda: _plot(list(sys.argv[1:] if argv is None else argv), prog))


def _plot(argv: list[str], prog: str) -> None:
    args = parser(prog).parse_args(argv)
    if args.window < 1 or args.points < 1 or args.n_bootstrap < 1 or args.last < 1:
        raise ZooError(
            f"--window, --points, --n-bootstrap and --last must be >= 1, "
            f"got {args.window}, {args.points}, {args.n_bootstrap}, {args.last}"
        )
    budgets = parse_at_steps(args.at_steps)
    if (budgets or args.grid is not None) and not args.by_delay:
        raise ZooError("--at-steps and --grid go with --by-delay")
    runs = find_runs(args.log_folder, args.algos, args.envs)
    if args.grid is not None:
        grid = load_grid(args.grid)
        names = {cell.name for cell in grid.cells()}
        runs = [run for run in runs if run.path.parents[1].name in names]
        present = {run.env_id for run in runs}
        budgets = {**{env: steps for env, steps in grid.budgets.items() if env in present}, **budgets}
    if not runs:
        where = f" of the cells of {args.grid}" if args.grid is not None else ""
        raise ZooError(
            f"no zoo runs{where} under {args.log_folder!r} for algos {args.algos or 'any'} and envs "
            f"{args.envs or 'any'}"
        )
    unknown = sorted(set(budgets) - {run.env_id for run in runs})
    if unknown:
        raise ZooError(f"--at-steps {', '.join(unknown)}: no runs of that env under {args.log_folder!r}")
    output = args.output_dir or Path(args.log_folder) / "plots"
    if args.by_delay:
        random = read_random_play(args.log_folder)
        _write_by_delay(runs, output, args.n_bootstrap, args.seed, args.last, budgets, random)
        return
    by_env: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_env[run.env_id].append(run)
    for env_id, env_runs in sorted(by_env.items()):
        png = output / f"{_stem(env_id)}.png"
        written = plot_env(env_runs, png, args.source, args.window, args.points)
        print(f"Wrote {written}" if written else f"No {args.source} data for {env_id}: skipped")
    table = atari_table(runs, args.n_bootstrap, args.seed)
    if table is not None:
        output.mkdir(parents=True, exist_ok=True)
        (output / "atari100k.md").write_text(table)
        print(table)
        print(f"Wrote {output / 'atari100k.md'}")


if __name__ == "__main__":
    sys.exit(main())
