"""The delay benchmark as one command: delay-aware against delay-oblivious agents, across delays and envs.

::

    python -m delayzoo.zoo.study -f logs/study            # the whole grid (CPU-hours: see below)
    python -m delayzoo.zoo.study --quick -f logs/quick    # CartPole, delays 0 and 5, one seed, minutes

runs the grid of ``delayzoo/zoo/data/delay-benchmark.yml`` (``--quick``: ``delay-benchmark-quick.yml``;
``--grid FILE`` another one) with :mod:`delayzoo.zoo.sweep` on Ray: CartPole-v1 at random-walk delays of at
most 0, 2, 5 and 10 steps and MinAtar/Breakout-v1 at 0, 5 and 10 (p = 0.2, random filler actions at reset)
with PPO without and with the pending view and DelayedEZ with its forward model and the paper's Oblivious-EZ;
Pendulum-v1 at 0, 5 and 10 and dm_control/cartpole-swingup-v0 at 0 and 5 with SAC without and with the view;
PWM everywhere in forecast, augmented (CartPole only) and oblivious mode; seeds 0, 1 and 2 (CartPole 0-4). At
delay 0 each algorithm runs once. Every checkpoint of every run is evaluated on ``--eval-n-episodes`` (16)
episodes, and :mod:`delayzoo.zoo.random_play` plays each env and delay at random by the same protocol
(``<log folder>/random-play.csv``); then :mod:`delayzoo.zoo.plot` ``--by-delay --grid`` writes, under
``<log folder>/plots`` (``-o``), per env the final return (the mean of the last 3 evaluations) against the
maximum delay with 95% bootstrap intervals over seeds, the learning curves, and the return at the env's
``budget:`` (CartPole-v1 20k env steps, MinAtar/Breakout-v1 50k, Pendulum-v1 20k, the swing-up 50k agent
steps: every agent at an equal budget), with ``by-delay.md`` and ``at-steps.md`` (the same numbers and the
fraction of its delay-0 return each agent keeps). An env's ``seeds:`` in the grid file gives it other seeds
than the grid's.

The study resumes cell by cell: launch the same command again after an interruption, or on another
machine from committed results (a cell whose eval CSV is complete counts as done without its model).
Before it runs, the sweep prints the CPU time it projects for the cells left, from the CPU time the
finished cells recorded. Flags it does not know go to the sweep (``--address``, ``--cpus-per-run``,
``--dry-run``, ...) and from there to every ``train`` (``-n``, ``-params``, ...).

Bad input (an unknown env or agent in the grid, MinAtar without ``delayzoo[minatar]``, a budget ``-n``
below a cell's checkpoint interval, so that nothing but the final model would be evaluated) prints one
line and exits with code 2 before anything is written. The exit code is the sweep's otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from delayzoo.zoo import plot, random_play, sweep
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.grid import Cell, load_grid

__all__ = ["GRID", "OBS_GRID", "QUICK_GRID", "check_budgets", "main", "parser", "resolve_grid"]

GRID = Path(__file__).resolve().parent / "data" / "delay-benchmark.yml"
"""The grid of the delay benchmark."""
QUICK_GRID = GRID.with_name("delay-benchmark-quick.yml")
"""Its quick version (``--quick``)."""

OBS_GRID = GRID.with_name("obs-delay-benchmark.yml")
"""The observation-delay study's grid (``--grid obs-delay-benchmark.yml``)."""


def resolve_grid(path: Path) -> Path:
    """``path``, or the grid of that name that ships with the package when there is no such file."""
    shipped = GRID.with_name(path.name)
    return shipped if not path.exists() and path.name == str(path) and shipped.is_file() else path


def check_budgets(cells: Sequence[Cell], extra: Sequence[str]) -> None:
    """Refuse a cell whose budget ``-n`` is below its checkpoint interval ``--save-freq``.

    :raise ZooError: naming the cell, its budget and its interval
    """
    for cell in cells:
        args = [*cell.args, *extra]
        steps, every = sweep.flag_value(args, ("-n", "--n-timesteps")), sweep.flag_value(args, ("--save-freq",))
        try:
            steps_value = None if steps is None else int(steps)
            every_value = None if every is None else int(every)
        except ValueError:
            raise ZooError(f"{cell.name}: -n and --save-freq must be integers, got {steps!r}, {every!r}") from None
        if steps_value is not None and steps_value <= 0:
            raise ZooError(f"{cell.name}: -n {steps_value} leaves no step to train")
        if steps_value is not None and every_value is not None and 0 < steps_value < every_value:
            raise ZooError(
                f"{cell.name}: -n {steps_value} is below its --save-freq {every_value}: only the final model "
                "would be evaluated, and the study's final return averages the last 3 evaluations"
            )


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of ``delayzoo study`` (unknown flags go to the sweep)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="Every other flag (--address, --cpus-per-run, --dry-run, -n, -params, ...) goes to the sweep.",
        allow_abbrev=False,
    )
    parser.add_argument("-f", "--log-folder", type=Path, required=True, help="where the cells go")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="CartPole, delays 0 and 5, one seed, tiny budgets")
    which.add_argument(
        "--grid",
        type=Path,
        help=f"another grid file, or the name of one that ships with the package ({OBS_GRID.name}); "
        f"default: {GRID.name}",
    )
    parser.add_argument("--eval-n-episodes", type=int, default=16, help="eval episodes per checkpoint (default 16)")
    parser.add_argument("-o", "--output-dir", type=Path, help="figure and table folder (default <log folder>/plots)")
    parser.add_argument("--n-bootstrap", type=int, default=2000, help="bootstrap resamples of the intervals")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.study") -> int:
    """Run the study command line; return the exit code (2 for bad input, else the sweep's).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(prog, lambda: _study(argv, prog))


def _study(argv: list[str], prog: str) -> int:
    args, extra = parser(prog).parse_known_args(argv)
    grid = resolve_grid(args.grid) if args.grid else (QUICK_GRID if args.quick else GRID)
    check_budgets(load_grid(grid).cells(), extra)
    sweep_argv = ["--grid", str(grid), "-f", str(args.log_folder), "--eval-n-episodes", str(args.eval_n_episodes)]
    code = sweep.main([*sweep_argv, "--eval-checkpoints", "all", *extra], prog=f"{prog} (sweep)")
    if code == 2 or "--dry-run" in extra or not args.log_folder.is_dir():
        return code
    played = random_play.main(
        ["-f", str(args.log_folder), "-n", str(args.eval_n_episodes)], prog=f"{prog} (random play)"
    )
    output = args.output_dir or args.log_folder / "plots"
    plot_argv = ["-f", str(args.log_folder), "--by-delay", "--grid", str(grid), "-o", str(output)]
    plotted = plot.main([*plot_argv, "--n-bootstrap", str(args.n_bootstrap)], prog=f"{prog} (plot)")
    return code or played or plotted


if __name__ == "__main__":
    sys.exit(main())
