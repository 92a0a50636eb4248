"""Grids of zoo runs on Ray: every cell one ``train`` + ``eval`` run, on a laptop or on a cluster.

::

    python -m delayzoo.zoo.sweep --algos ppo a2c --envs CartPole-v1 --delays 0 2 5 --seeds 0 1 \\
        -f logs/delay-study -n 20000 --save-freq 5000

runs the grid ``--algos`` x ``--envs`` x ``--delays`` x ``--delay-process`` x ``--seeds``: each cell is
``python -m delayzoo.zoo.train --algo A --env E --delay D --delay-process P --seed S -f <cell folder>``
followed by ``python -m delayzoo.zoo.eval`` of that run, each in its own process inside one Ray task
(``--cpus-per-run``, ``--gpus-per-run``, fractions allowed), so that a run that crashes or is killed
takes no other run down. Every other flag (``-n``, ``--save-freq``, ``-params``, ``--preset``,
``--delay-p``, ...) goes to every ``train``. ``--pending-view`` gives every cell the pending actions.
``--delay-kind observation`` makes the delays observation delays (``--obs-delay D --obs-delay-process P``),
and the cells' names say so (``ppo_CartPole-v1_obs-delay2_seed0``).

A cell's folder is ``<log folder>/<algo>_<env>_<delay>_seed<seed>/`` (``ppo_CartPole-v1_delay2_seed0``),
holding rl_zoo3's usual ``<algo>/<env>_<id>/`` run folder, ``eval_result/`` and the cell's log
``sweep.log`` (both commands' output). ``delayzoo.zoo.plot -f <log folder>`` reads these runs as any others
(``--by-delay``: final return against delay).

Launching the same sweep again skips the cells whose training finished (the model's step counter
reached ``-n``, or the YAML's ``n_timesteps``) and whose eval CSV is complete, only evaluates a trained
cell without one, and resumes an interrupted cell from its latest saved model (the checkpoints of
``--save-freq``, or the model saved at Ctrl-C) with ``-i``, the step counter continuing. Ctrl-C (or
SIGTERM) stops the sweep: queued runs are cancelled, running ones save their model, and the command to
resume is printed.

Ray starts locally on the machine's cores unless ``--address`` names a cluster (``auto``, ``HOST:PORT``
or ``ray://HOST:PORT``); on a cluster the log folder must be on a file system every node sees, and
delayzoo installed on every node. Ray is the extra ``pip install delayzoo[ray]``.

Bad input (an empty grid, an unknown algorithm or env in any cell, contradictory delay flags,
``--gpus-per-run`` on a cluster without GPUs, an unreachable ``--address``) prints a message and exits
with code 2 before anything is written. The exit code is 1 when a run failed, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from delayzoo.agents.common.parent_death import set_parent_death_signal
from delayzoo.agents.common.ray_connect import UnreachableClusterError, connect, import_ray
from delayzoo.zoo.delay_settings import KINDS, PROCESSES
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.grid import CELL_RECORD, Cell, load_grid, read_cell_record, sweep_grid
from delayzoo.zoo.runs import Run, find_runs

__all__ = [
    "Cell",
    "CellResult",
    "CellTask",
    "check_cells",
    "flag_value",
    "main",
    "make_task",
    "plan_cell",
    "run_cell",
    "run_sweep",
    "saved_steps",
    "sweep_grid",
]

_SET_BY_THE_SWEEP = {
    "--algo": "--algos",
    "--env": "--envs",
    "--seed": "--seeds",
    "--delay": "--delays",
    "--delay-process": "--delay-process (a sweep flag)",
    "--obs-delay": "--delay-kind observation with --delays (sweep flags), or a grid variant's delay_kind",
    "--obs-delay-process": "--delay-kind observation with --delay-process (sweep flags)",
    "--pending-view": "--pending-view (a sweep flag)",
    "-f": "-f (a sweep flag)",
    "--log-folder": "-f (a sweep flag)",
    "-i": "relaunching the sweep (it resumes interrupted runs)",
    "--trained-agent": "relaunching the sweep (it resumes interrupted runs)",
    "-optimize": "python -m delayzoo.zoo.train -optimize (one study per command)",
    "--optimize-hyperparameters": "python -m delayzoo.zoo.train -optimize (one study per command)",
}
"""train flags a sweep sets itself, with what to use instead."""

_RUNNING = ".running"
"""The marker a cell's task keeps in the cell folder while it runs (host and pid)."""


@dataclasses.dataclass
class CellTask:
    """What one Ray task runs: the cell's commands (train unless already trained, then eval)."""

    cell: Cell
    folder: Path
    action: str
    commands: list[tuple[str, list[str]]]
    env: dict[str, str]
    save_timeout: float = 120.0

    @property
    def log(self) -> Path:
        """The log of the cell's commands."""
        return self.folder / "sweep.log"


@dataclasses.dataclass
class CellResult:
    """How a cell's task ended: ``status`` is ``"done"``, ``"failed"`` or ``"interrupted"``."""

    cell: Cell
    status: str
    log: Path
    message: str = ""
    seconds: float = 0.0


# ---------------------------------------------------------------------------------------------- grid
def train_argv(cell: Cell, log_folder: Path, extra: Sequence[str], resume: Sequence[str] = ()) -> list[str]:
    """A cell's ``train`` flags: its own, its env's for its algorithm, the passed-through ones, the resume
    flags, then one ``-params`` (rl_zoo3 keeps only the last) with the items of the env's flags, the cell's
    own and the passed-through ones, in that order (a later value of a key wins)."""
    env_params, env_rest = _split_params(cell.args)
    params, rest = _split_params(extra)
    params = [*env_params, *cell.params, *params]
    return [*cell.train_args(log_folder), *env_rest, *rest, *resume, *(["-params", *params] if params else [])]


def _split_params(extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(the items of every -params, the other flags)`` of the passed-through flags."""
    params: list[str] = []
    rest: list[str] = []
    taking = False
    for arg in extra:
        if arg in ("-params", "--hyperparams"):
            taking = True
        elif taking and not (arg.startswith("-") and ":" not in arg):
            params.append(arg)
        else:
            taking = False
            rest.append(arg)
    return params, rest


def check_cells(cells: Sequence[Cell], extra: Sequence[str], log_folder: Path) -> None:
    """Run ``train``'s own checks (algorithm, env, delay flags, ``-i``) on every cell's command line."""
    from delayzoo.zoo.train import check_arguments

    for cell in cells:
        check_arguments(train_argv(cell, log_folder, extra))


_GRID_AXES = ("algos", "envs", "delays", "seeds", "delay_process", "delay_kind", "pending_view")
"""The flags that make a plain sweep's grid, which ``--grid`` replaces."""


def grid_cells(args: argparse.Namespace) -> list[Cell]:
    """The cells of the command line: from ``--grid FILE`` (``--envs``, ``--delays``, ``--seeds`` and
    ``--agents`` select some of its cells) or from the axis flags."""
    given = [f"--{axis.replace('_', '-')}" for axis in _GRID_AXES if getattr(args, axis) not in (None, False)]
    if args.grid is not None:
        given = [flag for flag in given if flag not in ("--envs", "--delays", "--seeds")]
        if given:
            raise ZooError(f"--grid {args.grid} gives the whole grid: drop {', '.join(given)}")
        cells = load_grid(args.grid).cells()
        selectors = (
            ("--envs", args.envs, "env_id"),
            ("--delays", args.delays, "delay"),
            ("--seeds", args.seeds, "seed"),
            ("--agents", args.agents, "agent"),
        )
        for flag, chosen, value in selectors:
            known = {getattr(cell, value) for cell in cells}
            unknown = sorted(set(chosen or ()) - known)
            if unknown:
                listed = ", ".join(str(item) for item in sorted(known))
                raise ZooError(f"{flag} {' '.join(map(str, unknown))}: not in {args.grid} (it has {listed})")
        algos = {cell.algo for cell in cells if cell.agent in (args.agents or ())}  # before --delays 0 drops them
        for _, chosen, value in selectors[:3]:
            if chosen is not None:
                cells = [cell for cell in cells if getattr(cell, value) in chosen]
        if args.agents:
            cells = [cell for cell in cells if cell.agent in args.agents or (cell.delay == 0 and cell.algo in algos)]
        return cells
    if args.agents:
        raise ZooError("--agents selects agents of a --grid file")
    if not args.algos or not args.envs:
        raise ZooError("give the grid: --algos and --envs (with --delays, --seeds, ...), or --grid FILE.yml")
    return sweep_grid(
        args.algos,
        args.envs,
        args.delays if args.delays is not None else [0],
        args.seeds if args.seeds is not None else [0],
        args.delay_process or ["constant"],
        bool(args.pending_view),
        args.delay_kind or "execution",
    )


def project_cpu(cells: Sequence[Cell], plans: Sequence[tuple[str, str, list[str]]], log_folder: Path) -> str:
    """One line: the CPU time the cells left will take, from the recorded cost of the finished ones.

    A cell to train costs the median (train + eval) CPU of the finished cells of the same agent and env
    (of the same algorithm and env when no cell of that agent has finished), less what it has already
    spent; a cell to evaluate, the median eval CPU. The finished cells are the selected ones planned
    "skip" and every other cell folder under ``log_folder`` with a record and an evaluation CSV (so
    that ``--seeds 2`` is priced from seeds 0 and 1). Cells with no finished peer are counted apart.
    """
    selected = {cell.name for cell in cells}
    finished = [
        ((cell.agent, cell.algo, cell.env_id), read_cell_record(log_folder / cell.name).get("cpu_seconds") or {})
        for cell, (action, _, _) in zip(cells, plans)
        if action == "skip"
    ]
    for record_path in sorted(log_folder.glob(f"*/{CELL_RECORD}")):
        folder = record_path.parent
        if folder.name not in selected and any(folder.glob("eval_result/*/*.csv")):
            record = read_cell_record(folder)
            peer = (str(record.get("label")), str(record.get("algo")), str(record.get("env")))
            finished.append((peer, record.get("cpu_seconds") or {}))
    costs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for (agent, algo, env_id), spent in finished:
        if spent:
            pair = (float(spent.get("train", 0.0)), float(spent.get("eval", 0.0)))
            costs.setdefault((agent, env_id), []).append(pair)
            costs.setdefault((algo, env_id), []).append(pair)
    left = [(cell, action) for cell, (action, _, _) in zip(cells, plans) if action != "skip"]
    if not left:
        return f"CPU time projected for the cells left: none (all {len(cells)} done)"
    total, unknown = 0.0, []
    for cell, action in left:
        known = costs.get((cell.agent, cell.env_id)) or costs.get((cell.algo, cell.env_id))
        if not known:
            unknown.append(cell.agent + " on " + cell.env_id)
            continue
        train, evaluate = (float(sorted(values)[len(values) // 2]) for values in zip(*known))
        spent = read_cell_record(log_folder / cell.name).get("cpu_seconds") or {}
        total += evaluate if action == "eval" else max(train - float(spent.get("train", 0.0)), 0.0) + evaluate
    line = f"CPU time projected for the {len(left)} cell(s) left: {total / 3600:.1f} CPU-hours"
    if unknown:
        kinds = sorted(set(unknown))
        line += f", plus {len(unknown)} cell(s) of unknown cost (nothing finished yet for {', '.join(kinds)})"
    return line


def _check_extra(extra: Sequence[str]) -> None:
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in _SET_BY_THE_SWEEP:
            raise ZooError(f"{flag} is set by the sweep for each cell: use {_SET_BY_THE_SWEEP[flag]}")
        if flag in ("-h", "--help"):
            raise ZooError("-h: see 'python -m delayzoo.zoo.sweep -h' and 'python -m delayzoo.zoo.train -h'")


def flag_value(args: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value of the last of ``flags`` in a command line (``--flag V`` or ``--flag=V``; the last wins,
    as in argparse), ``None`` when absent."""
    value = None
    for index, arg in enumerate(args):
        for flag in flags:
            if arg == flag and index + 1 < len(args):
                value = args[index + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    return value


def _requested_steps(extra: Sequence[str]) -> int | None:
    """The ``-n`` passed through, ``None`` when absent or <= 0."""
    steps = flag_value(extra, ("-n", "--n-timesteps"))
    try:
        return int(steps) if steps is not None and int(steps) > 0 else None
    except ValueError:
        raise ZooError(f"-n must be an integer, got {steps!r}") from None


# ---------------------------------------------------------------------------------------------- plans
def saved_steps(path: Path) -> int:
    """The step counter of a saved model, read from the archive's plain JSON (nothing unpickled): SB3's
    top-level ``num_timesteps``, or the ``counters`` of our agents' plain format."""
    with zipfile.ZipFile(path) as archive:
        data = json.loads(archive.read("data"))
    return int((data["counters"] if "counters" in data else data)["num_timesteps"])


def _csv_steps(run: Run, n_episodes: int) -> list[int]:
    """The steps of the models the run's eval CSV scores, if every row has ``n_episodes`` scores; else ``[]``."""
    if not run.eval_csv.is_file():
        return []
    rows = [line.split(",") for line in run.eval_csv.read_text().splitlines() if line]
    if not rows or any(len(row) != n_episodes + 1 for row in rows):
        return []
    try:
        return [int(row[0]) for row in rows[1:]]
    except ValueError:
        return []


def _complete_csv(run: Run, final_steps: int, n_episodes: int) -> bool:
    """Whether the run's eval CSV is whole: ``n_episodes`` scores per row and a row for the final model."""
    if not run.eval_csv.is_file() or run.eval_csv.stat().st_mtime < run.final_model.stat().st_mtime:
        return False
    return final_steps in _csv_steps(run, n_episodes)


def _latest_save(run: Run) -> tuple[int, Path] | None:
    """``(steps, path)`` of the run's most advanced readable model (the final model on a tie).

    A model cut short by a kill (not a zip, or without its data) is passed over.
    """
    readable = []
    for path in [*(path for _, path in run.checkpoints()), run.final_model]:
        try:
            readable.append((saved_steps(path), path))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            continue
    return max(readable, key=lambda save: (save[0], save[1] == run.final_model)) if readable else None


def _total_steps(runs: list[Run], requested: int | None) -> int | None:
    """The cell's training length: ``-n``, else the YAML's ``n_timesteps`` its first run recorded."""
    if requested is not None:
        return requested
    if runs and runs[0].config.get("n_timesteps") is not None:
        return int(float(runs[0].config["n_timesteps"]))
    return None


def plan_cell(cell: Cell, log_folder: Path, requested_steps: int | None, n_episodes: int) -> tuple[str, str, list[str]]:
    """What a (re)launch does with a cell: ``(action, description, train flags)``.

    ``action`` is ``"train"`` (a new run), ``"resume"`` (``-i`` the latest save, ``-n`` the remaining
    steps), ``"eval"`` (trained, not evaluated) or ``"skip"`` (trained and evaluated).
    """
    runs = find_runs(log_folder / cell.name, [cell.algo], [cell.env_id])
    if not runs:
        return "train", "new", []
    latest, total = runs[-1], _total_steps(runs, requested_steps)
    save = _latest_save(latest)
    if save is None:
        evaluated = _csv_steps(latest, n_episodes)
        if evaluated and total is not None and max(evaluated) >= total:  # results kept, models not (a commit)
            return "skip", f"done ({latest.name}, evaluated at {max(evaluated)} steps; no model kept)", []
        return "train", f"new ({latest.name} saved no model)", []
    steps, path = save
    if path == latest.final_model and (total is None or steps >= total):
        if _complete_csv(latest, steps, n_episodes):
            return "skip", f"done ({latest.name}, {steps} steps, evaluated)", []
        return "eval", f"evaluate {latest.name} ({steps} steps)", []
    if total is not None and steps >= total:  # a checkpoint at the last step, final model missing
        return "resume", f"resume {latest.name} from {path.name} ({steps}/{total} steps)", ["-i", str(path), "-n", "1"]
    remaining = str(total - steps) if total is not None else "-1"
    return (
        "resume",
        f"resume {latest.name} from {path.name} ({steps}/{total} steps)",
        ["-i", str(path), "-n", remaining],
    )


def _threads(cpus_per_run: float) -> int:
    return max(1, math.floor(cpus_per_run))


def make_task(
    cell: Cell,
    log_folder: Path,
    extra: Sequence[str],
    plan: tuple[str, str, list[str]],
    eval_args: Sequence[str],
    cpus_per_run: float,
    gpus_per_run: float,
    save_timeout: float,
) -> CellTask:
    """The commands of a cell's task (absolute paths: a worker may start elsewhere)."""
    action, _, resume = plan
    python = [sys.executable, "-m"]
    threads = str(_threads(cpus_per_run))
    train = [*python, "delayzoo.zoo.train", *train_argv(cell, log_folder, extra, resume)]
    if not any(arg.split("=", 1)[0] == "--num-threads" for arg in extra):
        train += ["--num-threads", threads]
    evaluate = [*python, "delayzoo.zoo.eval", "--algo", cell.algo, "--env", cell.env_id]
    # the grid's and the algorithm's eval flags come last, so that theirs win (--num-threads included)
    evaluate += ["-f", str(log_folder / cell.name), "--num-threads", threads, *eval_args, *cell.eval_args]
    commands = ([] if action == "eval" else [("train", train)]) + [("eval", evaluate)]
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}
    if gpus_per_run == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return CellTask(cell, log_folder / cell.name, action, commands, env, save_timeout)


# ---------------------------------------------------------------------------------------------- a task
def _child_signals() -> None:
    """In the child: SIGINT is Ctrl-C (even if inherited as ignored), and comes when the Ray worker dies."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # Ray's worker threads block it
    set_parent_death_signal(signal.SIGINT)


def _run_command(argv: list[str], task: CellTask, log: Any) -> tuple[int, bool]:
    """Run one command into the log; on KeyboardInterrupt (Ray's cancel) pass SIGINT on and let it save."""
    child = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **task.env},
        start_new_session=True,
        preexec_fn=_child_signals,
    )
    try:
        while True:  # short waits: Ray's cancel raises KeyboardInterrupt between bytecodes, not in a blocking wait
            try:
                return child.wait(timeout=0.5), False
            except subprocess.TimeoutExpired:
                continue
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=task.save_timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return child.returncode, True


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _write_record(task: CellTask, cpu: dict[str, float]) -> None:
    """The cell's :data:`~delayzoo.zoo.grid.CELL_RECORD`: what it is, and the CPU seconds of all its launches."""
    record = {**task.cell.record(), "cpu_seconds": cpu}
    temporary = task.folder / f".{CELL_RECORD}.tmp"
    temporary.write_text(yaml.safe_dump(record, sort_keys=False))
    temporary.replace(task.folder / CELL_RECORD)


def run_cell(task: CellTask) -> CellResult:
    """Run a cell's commands one after the other, each in its own process; stop at the first failure.

    The CPU time of each command is added to the cell's record (``cpu_seconds.train``, ``.eval``). A new
    run (action ``"train"``) starts the count again: what an earlier launch spent on a run whose model
    is lost is not the cost of the result.
    """
    start = time.monotonic()
    task.folder.mkdir(parents=True, exist_ok=True)
    marker = task.folder / _RUNNING
    marker.write_text(f"{socket.gethostname()} {os.getpid()}\n")
    spent = {} if task.action == "train" else read_cell_record(task.folder).get("cpu_seconds") or {}
    cpu = {"train": 0.0, "eval": 0.0, **spent}
    _write_record(task, cpu)
    try:
        with open(task.log, "a") as log:
            for phase, argv in task.commands:
                log.write(f"\n$ {shlex.join(argv)}\n")
                log.flush()
                before = _children_cpu()
                code, interrupted = _run_command(argv, task, log)
                cpu[phase] = round(cpu[phase] + _children_cpu() - before, 1)
                _write_record(task, cpu)
                seconds = time.monotonic() - start
                if interrupted:
                    return CellResult(task.cell, "interrupted", task.log, f"{phase} stopped (exit {code})", seconds)
                if code != 0:
                    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                    return CellResult(task.cell, "failed", task.log, f"{phase} failed ({how})", seconds)
        return CellResult(task.cell, "done", task.log, task.action, time.monotonic() - start)
    finally:
        marker.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------- Ray
def _import_ray() -> Any:
    try:
        return import_ray("sweeps run")
    except ImportError as error:
        raise ZooError(str(error)) from None


def _connect(ray: Any, address: str | None, cpus_per_run: float, gpus_per_run: float) -> bool:
    """Start or join Ray (``True`` when this call started it); check the cluster can hold one run.

    A process that is already connected (``ray.init`` called before) keeps its connection
    (:func:`delayzoo.agents.common.ray_connect.connect`).
    """
    try:
        started = connect(address, "sweeps")
    except ValueError:
        raise ZooError(f"--address must be 'auto', HOST:PORT or ray://HOST:PORT, got {address!r}") from None
    except UnreachableClusterError as error:
        raise ZooError(f"cannot reach the Ray cluster at --address {address}: {error.reason}") from error
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    gpus = max((node.get("GPU", 0.0) for node in nodes), default=0.0)
    cpus = max((node.get("CPU", 0.0) for node in nodes), default=0.0)
    problem = None
    if gpus_per_run > gpus:
        problem = f"--gpus-per-run {gpus_per_run:g}, but " + (
            f"no node has more than {gpus:g} GPU(s)" if gpus else "the Ray cluster has no GPUs"
        )
    elif cpus_per_run > cpus:
        problem = f"--cpus-per-run {cpus_per_run:g}, but no node has more than {cpus:g} CPU(s)"
    if problem:
        if started:
            ray.shutdown()
        raise ZooError(problem)
    return started


def _progress(total: int) -> Any:
    from tqdm import tqdm

    interactive = sys.stdout.isatty()
    return tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stdout, mininterval=1 if interactive else 30)


def run_sweep(tasks: list[CellTask], cpus_per_run: float, gpus_per_run: float, resume_command: str) -> int:
    """Run the tasks on the connected Ray; print results and progress; the exit code (0, 1 or 130)."""
    import ray

    remote = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0)(run_cell)
    pending = {remote.remote(task): task for task in tasks}
    counts = {"done": 0, "failed": 0}
    failures: list[CellResult] = []

    def collect(ref: Any, bar: Any) -> None:
        task = pending.pop(ref)
        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return
        except Exception as error:  # the worker died (killed, out of memory) or run_cell raised
            result = CellResult(task.cell, "failed", task.log, f"task failed: {type(error).__name__}")
        if result.status == "interrupted":
            bar.write(f"stopped  {task.cell.name}: {result.message}; log {result.log}")
            return
        counts["done" if result.status == "done" else "failed"] += 1
        if result.status == "failed":
            failures.append(result)
        bar.write(f"{result.status:<8} {task.cell.name} ({result.seconds:.0f} s) {result.message}; log {result.log}")
        show(bar)
        bar.update(1)

    def show(bar: Any) -> None:
        running = sum((task.folder / _RUNNING).exists() for task in pending.values())
        bar.set_postfix_str(
            f"done {counts['done']}, running {running}, failed {counts['failed']}, left {len(pending) - running}",
            refresh=False,
        )

    with _progress(len(tasks)) as bar:
        try:
            while pending:
                show(bar)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    collect(ref, bar)
            show(bar)
        except KeyboardInterrupt:
            running = [ref for ref, task in pending.items() if (task.folder / _RUNNING).exists()]
            bar.write(
                f"\nCtrl-C: cancelling the queued runs, letting {len(running)} running run(s) save their models..."
            )
            for ref in list(pending):
                ray.cancel(ref)
            deadline = time.monotonic() + max(task.save_timeout for task in tasks) + 30
            try:
                while pending and time.monotonic() < deadline:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                    for ref in ready:
                        collect(ref, bar)
            except KeyboardInterrupt:
                bar.write("Second Ctrl-C: not waiting for the runs to save.")
            bar.write(f"Sweep stopped. To resume it, run the same command again:\n  {resume_command}")
            return 130
    for result in failures:
        print(f"FAILED {result.cell.name}: {result.message}; see {result.log}")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------- CLI
def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of ``delayzoo sweep`` (unknown flags go to every ``train``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="Every other flag (-n, --save-freq, -params, --preset, --delay-p, ...) goes to each train command.",
        allow_abbrev=False,
    )
    grid = parser.add_argument_group("the grid")
    grid.add_argument("--algos", nargs="+", help="algorithms (ppo, dqn, pwm, delayed_ez, ...)")
    grid.add_argument("--envs", nargs="+", help="Gymnasium env ids")
    grid.add_argument("--delays", nargs="+", type=int, help="maximum delays in steps (default: 0)")
    grid.add_argument("--delay-process", nargs="+", choices=PROCESSES, help="delay processes (default: constant)")
    grid.add_argument(
        "--delay-kind",
        choices=KINDS,
        help="what the delays delay: the actions (execution, the default) or the observations (observation: "
        "--obs-delay D in every train command, cells named obs-<delay>)",
    )
    grid.add_argument("--pending-view", action="store_true", help="every cell observes the pending actions")
    grid.add_argument("--seeds", nargs="+", type=int, help="training seeds (default: 0)")
    grid.add_argument(
        "--grid",
        type=Path,
        help="a grid file instead of the flags above: named agent variants (algorithm, -params, pending view) "
        "and per-env delays (see delayzoo.zoo.grid)",
    )
    grid.add_argument(
        "--agents",
        nargs="+",
        help="with --grid: only these agents' cells (variant labels; their algorithm's delay-0 cells come along); "
        "--envs, --delays and --seeds with --grid: only the cells of these envs, delays and seeds",
    )
    parser.add_argument(
        "-f", "--log-folder", type=Path, default=Path("logs"), help="where the cells go (default: logs)"
    )
    parser.add_argument("--eval-n-episodes", type=int, default=10, help="eval episodes per saved model (default 10)")
    parser.add_argument(
        "--eval-checkpoints",
        choices=("all", "last"),
        default="all",
        help="evaluate every checkpoint or the final model",
    )
    parser.add_argument("--eval-n-envs", type=int, default=1, help="eval episodes played side by side (default 1)")
    ray_group = parser.add_argument_group("Ray")
    ray_group.add_argument("--cpus-per-run", type=float, default=1.0, help="CPUs each run reserves (default 1)")
    ray_group.add_argument("--gpus-per-run", type=float, default=0.0, help="GPUs each run reserves (default 0)")
    ray_group.add_argument(
        "--address", help="join a Ray cluster: 'auto', HOST:PORT or ray://HOST:PORT (default: start Ray locally)"
    )
    ray_group.add_argument(
        "--save-timeout", type=float, default=120.0, help="seconds a run gets to save after Ctrl-C (default 120)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the grid and what each cell would do; run nothing"
    )
    return parser


def _stop_like_ctrl_c(number: int, frame: Any) -> None:
    """SIGTERM (a job scheduler's stop) stops the sweep as Ctrl-C does."""
    raise KeyboardInterrupt


def _catch_stop_signals() -> dict[int, Any]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt, even when started in the background (SIGINT ignored).

    Set before Ray starts, so that its processes do not inherit an ignored SIGINT (Ray's cancel is a
    SIGINT). Returns the handlers to put back; none outside the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers: dict[int, Any] = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    return handlers


def _dry_run(cells: list[Cell], plans: list[tuple[str, str, list[str]]], tasks: list[CellTask]) -> None:
    print(f"{len(cells)} cell(s); {len(tasks)} to run:")
    by_cell = {task.cell: task for task in tasks}
    for cell, (_, description, _) in zip(cells, plans):
        print(f"  {cell.name}: {description}")
        for _, argv in by_cell[cell].commands if cell in by_cell else []:
            print(f"      {shlex.join(argv[1:])}")


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.sweep") -> int:
    """Run the sweep command line; return the exit code (2 for bad input, 1 if a run failed, 130 on Ctrl-C).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_command(prog, lambda: _sweep(argv, prog))


def _sweep(argv: list[str], prog: str) -> int:
    args, extra = parser(prog).parse_known_args(argv)
    if args.cpus_per_run <= 0 or args.gpus_per_run < 0:
        raise ZooError(
            f"--cpus-per-run must be > 0 and --gpus-per-run >= 0, got {args.cpus_per_run}, {args.gpus_per_run}"
        )
    if args.eval_n_episodes < 1 or args.eval_n_envs < 1 or args.save_timeout <= 0:
        raise ZooError(
            "--eval-n-episodes, --eval-n-envs and --save-timeout must be > 0, "
            f"got {args.eval_n_episodes}, {args.eval_n_envs}, {args.save_timeout}"
        )
    _check_extra(extra)
    cells = grid_cells(args)
    log_folder = args.log_folder.resolve()
    check_cells(cells, extra, log_folder)
    ray = _import_ray()
    plans = [
        plan_cell(cell, log_folder, _requested_steps([*cell.args, *extra]), args.eval_n_episodes) for cell in cells
    ]
    eval_args = ["-n", str(args.eval_n_episodes), "--n-envs", str(args.eval_n_envs), "--checkpoints",
                 args.eval_checkpoints]
    eval_args += ["--device", "cpu"] if args.gpus_per_run == 0 else []
    tasks = [
        make_task(cell, log_folder, extra, plan, eval_args, args.cpus_per_run, args.gpus_per_run, args.save_timeout)
        for cell, plan in zip(cells, plans)
        if plan[0] != "skip"
    ]
    print(project_cpu(cells, plans, log_folder))
    if args.dry_run:
        _dry_run(cells, plans, tasks)
        return 0
    for cell, (action, description, _) in zip(cells, plans):
        if action == "skip":
            print(f"skipped  {cell.name}: {description}")
    if not tasks:
        print(f"Nothing to run: the {len(cells)} cell(s) are trained and evaluated.")
        return 0
    handlers = _catch_stop_signals()
    started = False
    try:
        started = _connect(ray, args.address, args.cpus_per_run, args.gpus_per_run)
        for task in tasks:
            (task.folder / _RUNNING).unlink(missing_ok=True)  # left by a killed launch
        code = run_sweep(tasks, args.cpus_per_run, args.gpus_per_run, shlex.join([*shlex.split(prog), *argv]))
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        if started:
            ray.shutdown()
    if code != 130:
        print(f"Plot: python -m delayzoo.zoo.plot -f {shlex.quote(str(args.log_folder))} --by-delay")
    return code


if __name__ == "__main__":
    sys.exit(main())
