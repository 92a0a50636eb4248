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
delay counts as delay 0. The same runs give the same table, byte for byte, and the same PNG.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from delayzoo.zoo.errors import ZooError, one_line
from delayzoo.zoo.grid import read_cell_record
from delayzoo.zoo.runs import Run, find_runs, read_monitor
from delayzoo.zoo.scores import AGGREGATES, atari_game, bootstrap_interval, human_normalized, reference_scores

__all__ = [
    "DelayLine",
    "atari_table",
    "delay_results",
    "delay_table",
    "final_return",
    "learning_curve",
    "main",
    "plot_by_delay",
    "plot_env",
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


def atari_table(runs: list[Run], n_resamples: int = 2000, seed: int = 0) -> str | None:
    """The Atari 100k markdown summary of the evaluated runs' final models; ``None`` without any."""
    finals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
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


@dataclasses.dataclass
class DelayLine:
    """One line of a by-delay figure: an agent's final returns (one per run) at each delay.

    :param label: the agent (a sweep variant's label, or the algorithm and delay setting)
    :param family: the algorithm, which gives the line its colour
    :param aware: the agent uses the pending actions (solid line) or not (dashed)
    :param points: delay -> final return of each run
    """

    label: str
    family: str
    aware: bool
    points: dict[int, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))


def _delay_line(run: Run) -> tuple[int, str, bool]:
    """The delay value of a run, the label of its line (the algorithm and the delay setting but the value),
    and whether it observes the pending actions."""
    settings = run.delay_settings().resolved()
    if settings.delay is None:
        return 0, run.algo, False
    if settings.process == "random-walk":
        variant = f" (random-walk from {settings.min_delay}, p={settings.p:g})"
    elif settings.process == "iid":
        variant = f" (iid from {settings.min_delay})"
    else:
        variant = ""
    return settings.delay, run.algo + variant + (" +view" if settings.pending_view else ""), settings.pending_view


def delay_results(runs: list[Run], last: int = 3) -> dict[str, dict[str, DelayLine]]:
    """``{env id: {line label: DelayLine}}`` of the evaluated runs (final return: mean of the last ``last``
    evaluations).

    A run made by a sweep from a grid file has its cell's record (:data:`~delayzoo.zoo.grid.CELL_RECORD`):
    its line is the cell's agent; a delay-0 cell of an algorithm is the delay-0 point of every line of
    that algorithm on that env (at delay 0 the modes of an algorithm are one agent). Other runs: one line
    per algorithm and delay setting, a run without delay at delay 0.
    """
    results: dict[str, dict[str, DelayLine]] = defaultdict(dict)
    shared: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        score = final_return(run, last)
        if score is None:
            continue
        record = read_cell_record(run.path.parents[1])
        if record.get("label"):
            delay, label, family, aware = int(record["delay"]), str(record["label"]), run.algo, record["delay_aware"]
            if delay == 0 and label == run.algo:
                shared[(run.env_id, run.algo)].append(score)
                continue
        else:
            delay, label, aware = _delay_line(run)
            family = run.algo
        line = results[run.env_id].setdefault(label, DelayLine(label, family, bool(aware)))
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


def plot_by_delay(
    env_id: str, lines: dict[str, DelayLine], path: Path, n_resamples: int = 2000, seed: int = 0, last: int = 3
) -> Path:
    """Write the PNG of final return against delay for one env (``lines`` from :func:`delay_results`):
    colours by family, delay-aware agents solid and delay-oblivious ones dashed, 95% bootstrap intervals."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    families = sorted({line.family for line in lines.values()})
    colours = {family: plt.get_cmap("tab10")(index % 10) for index, family in enumerate(families)}
    seen: dict[str, int] = defaultdict(int)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    spread = 0.06 * max((max(line.points) for line in lines.values()), default=1)  # side by side, not on top
    for index, (label, line) in enumerate(sorted(lines.items())):
        delays = sorted(line.points)
        shift = spread * (index - (len(lines) - 1) / 2) / max(len(lines), 1)
        stats = np.array([_mean_interval(line.points[delay], n_resamples, seed) for delay in delays])
        runs = sorted({len(line.points[delay]) for delay in delays})
        counts = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
        error = [stats[:, 0] - stats[:, 1], stats[:, 2] - stats[:, 0]]
        marker = _MARKERS[seen[line.family] % len(_MARKERS)]
        seen[line.family] += 1
        axes.errorbar(
            np.array(delays) + shift,
            stats[:, 0],
            yerr=error,
            marker=marker,
            capsize=4,
            color=colours[line.family],
            linestyle="-" if line.aware else "--",
            label=f"{label} ({counts} run(s) per point)",
        )
    axes.set_title(f"{env_id}: final return against delay")
    axes.set_xlabel("maximum delay (steps)")
    axes.set_ylabel("final return" + (f" (mean of the last {last} evaluations)" if last > 1 else ""))
    axes.set_xticks(sorted({delay for line in lines.values() for delay in line.points}))
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(figure)
    return path


def delay_table(runs: list[Run], n_resamples: int = 2000, seed: int = 0, last: int = 3) -> str | None:
    """Markdown tables of final return against delay, and of the fraction of its delay-0 return each agent
    keeps, one pair per env; ``None`` without evaluated runs."""
    results = delay_results(runs, last)
    if not results:
        return None
    lines = []
    for env_id, by_label in sorted(results.items()):
        delays = sorted({delay for line in by_label.values() for delay in line.points})
        lines += [f"### {env_id}", "", "| agent | " + " | ".join(f"delay {delay}" for delay in delays) + " |"]
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
        delayed = [delay for delay in delays if delay > 0]
        if 0 in delays and delayed:
            lines += ["", "| agent | " + " | ".join(f"kept at {delay}" for delay in delayed) + " |"]
            lines.append("|---|" + "---|" * len(delayed))
            for label in sorted(by_label):
                base = means[label].get(0)
                cells = [
                    f"{means[label][delay] / base:.0%}" if base and delay in means[label] else "" for delay in delayed
                ]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    what = "each run's final model" if last == 1 else f"each run's last {last} evaluated models"
    lines.append(
        f"Final return: the mean eval return of {what} (mean over its eval episodes), mean over runs (seeds) "
        f"[95% percentile bootstrap over runs, {n_resamples} resamples] (number of runs). Kept: the mean at "
        "that delay over the mean at delay 0 (the same agent's, or its algorithm's delay-0 run)."
    )
    return "\n".join(lines) + "\n"


def _write_by_delay(runs: list[Run], output: Path, n_resamples: int, seed: int, last: int) -> None:
    table = delay_table(runs, n_resamples, seed, last)
    if table is None:
        raise ZooError("--by-delay needs evaluated runs: none of these runs has an eval CSV (run delayzoo.zoo.eval)")
    for env_id, lines in sorted(delay_results(runs, last).items()):
        png = output / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', env_id)}-by-delay.png"
        print(f"Wrote {plot_by_delay(env_id, lines, png, n_resamples, seed, last)}")
    (output / "by-delay.md").write_text(table)
    print(table)
    print(f"Wrote {output / 'by-delay.md'}")


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
    parser.add_argument("--n-bootstrap", type=int, default=2000, help="bootstrap resamples of the intervals")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.plot") -> int:
    """Run the plot command line; return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    try:
        args = parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.window < 1 or args.points < 1 or args.n_bootstrap < 1 or args.last < 1:
            raise ZooError(
                f"--window, --points, --n-bootstrap and --last must be >= 1, "
                f"got {args.window}, {args.points}, {args.n_bootstrap}, {args.last}"
            )
        runs = find_runs(args.log_folder, args.algos, args.envs)
        if not runs:
            raise ZooError(
                f"no zoo runs under {args.log_folder!r} for algos {args.algos or 'any'} and envs {args.envs or 'any'}"
            )
    except ZooError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    output = args.output_dir or Path(args.log_folder) / "plots"
    if args.by_delay:
        try:
            _write_by_delay(runs, output, args.n_bootstrap, args.seed, args.last)
        except ZooError as error:
            print(f"{prog}: error: {error}", file=sys.stderr)
            return 2
        return 0
    by_env: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_env[run.env_id].append(run)
    for env_id, env_runs in sorted(by_env.items()):
        png = output / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', env_id)}.png"
        written = plot_env(env_runs, png, args.source, args.window, args.points)
        print(f"Wrote {written}" if written else f"No {args.source} data for {env_id}: skipped")
    table = atari_table(runs, args.n_bootstrap, args.seed)
    if table is not None:
        output.mkdir(parents=True, exist_ok=True)
        (output / "atari100k.md").write_text(table)
        print(table)
        print(f"Wrote {output / 'atari100k.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
