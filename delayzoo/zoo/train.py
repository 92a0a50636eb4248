"""Train any zoo algorithm on any env, with execution and observation delays: rl_zoo3's ``train`` plus delay flags.

Every rl_zoo3 flag works (``-n``, ``--seed``, ``-f``, ``-tb``, ``--eval-freq``, ``--save-freq``,
``-params``, ``-conf``, ``-P``, ``-optimize``, ...). The zoo adds::

    --delay N                                   maximum execution delay (steps)
    --delay-process {constant,random-walk,iid}  how the delay evolves (default: constant)
    --delay-p P                                 random walk: probability of -1 and of +1 per step (0.2)
    --min-delay N                               random walk / iid: smallest delay (0)
    --delay-trace FILE                          execution delays replayed from a CSV file's delay column
    --obs-delay N                               maximum observation delay (steps)
    --obs-delay-process {constant,random-walk,iid}  how it evolves (default: constant)
    --obs-delay-p P                             its random walk: probability of -1 and of +1 per step (0.2)
    --obs-min-delay N                           its random walk / iid: smallest delay (0)
    --obs-delay-trace FILE                      observation delays replayed from a CSV file's delay column
    --pending-view                              observe the pending (unobserved and queued) actions (Dict
                                                observations)
    --no-pending-view                           don't, even where the --preset entry's delay: says so
    --init-action {noop,random}                 what fills the delay queue at reset (noop)
    --preset NAME                               use the YAML entry "<env id>@NAME" (e.g. CartPole-v1@delayed)
    --pixels                                    DeepMind Control tasks as 64x64 images
    --address ADDRESS                           the Ray cluster of DelayedEZ's actors ('auto', HOST:PORT,
                                                ray://HOST:PORT; default: a local Ray)
    --trust-run-files                           import any class name and evaluate keyword strings of the
                                                YAML file; unpickle a resumed run's vecnormalize.pkl,
                                                replay_buffer.pkl and the pickled entries of its SB3 model

Example::

    python -m delayzoo.zoo.train --algo ppo --env CartPole-v1 --delay 5 --delay-process random-walk \\
        --pending-view -n 50000 --seed 0

Bad input (unknown algorithm or env, a hyperparameter the algorithm does not take, contradictory delay
flags, a ``--device`` naming a CUDA device torch does not see, a resume file of another algorithm or env or
that is not a model file, a replay buffer file that is cut short or does not fit, a YAML file with Python
tags, class names outside the trusted packages, an env or wrapper that refuses its settings) prints a
one-line message and exits with code 2 before anything is written. Values typed with ``-params`` and
Python ``-conf`` files or modules are the user's own and are not checked (:mod:`delayzoo.zoo.trust`).
SIGTERM is handled like Ctrl-C: the model and the replay buffer are saved.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from functools import partial

import rl_zoo3.train
from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER

from delayzoo.agents.common.ray_connect import check_address
from delayzoo.zoo.algos import OUR_ALGOS, load_algorithm
from delayzoo.zoo.delay_settings import FLAG_FIELDS, INIT_ACTIONS, PROCESSES, DelaySettings
from delayzoo.zoo.envs import check_env_id, env_kind, import_gym_packages
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.exp_manager import DelayExperimentManager, ZooOptions
from delayzoo.zoo.flags import check_device_flag, check_threads_flag

__all__ = ["check_arguments", "main", "zoo_parser"]

def zoo_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The parser of the zoo's own flags (the rest goes to rl_zoo3's parser)."""
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    group = parser.add_argument_group("execution delay (delayzoo)")
    group.add_argument("--delay", type=int, help="maximum execution delay in steps")
    group.add_argument("--delay-process", choices=PROCESSES, help="how the delay evolves (default: constant)")
    group.add_argument("--delay-p", type=float, help="random walk: probability of -1 and of +1 per step (default 0.2)")
    group.add_argument("--min-delay", type=int, help="random walk / iid: the smallest delay (default 0)")
    group.add_argument(
        "--delay-trace", metavar="FILE", help="replay the delays of a CSV file's delay column (instead of --delay)"
    )
    group.add_argument("--pending-view", action="store_const", const=True, help="observe the pending actions")
    group.add_argument(
        "--no-pending-view",
        dest="pending_view",
        action="store_const",
        const=False,
        help="do not observe them, whatever the entry's delay: mapping says (a --preset's pending_view: true)",
    )
    group.add_argument("--init-action", choices=INIT_ACTIONS, help="delay queue filler at reset (default: noop)")
    observation = parser.add_argument_group("observation delay (delayzoo)")
    observation.add_argument("--obs-delay", type=int, help="maximum observation delay in steps")
    observation.add_argument(
        "--obs-delay-process", choices=PROCESSES, help="how the observation delay evolves (default: constant)"
    )
    observation.add_argument(
        "--obs-delay-p", type=float, help="its random walk: probability of -1 and of +1 per step (default 0.2)"
    )
    observation.add_argument("--obs-min-delay", type=int, help="its random walk / iid: the smallest delay (default 0)")
    observation.add_argument(
        "--obs-delay-trace", metavar="FILE", help="replay the observation delays of a CSV file's delay column"
    )
    other = parser.add_argument_group("delayzoo")
    other.add_argument("--preset", help="use the hyperparameter entry '<env id>@PRESET' (with its delay: settings)")
    other.add_argument("--pixels", action="store_true", help="DeepMind Control tasks as images (dm_control/ ids)")
    other.add_argument(
        "--address",
        help="the Ray cluster of DelayedEZ's actors (-params \"actor_kwargs:dict(self_play_actors=N, "
        "reanalysis_actors=M)\"): 'auto', "
        "HOST:PORT or ray://HOST:PORT (default: a local Ray)",
    )
    other.add_argument(
        "--trust-run-files",
        action="store_true",
        help="run code from the YAML file and the resumed run folder as rl_zoo3 does (any class name, keyword "
        "strings evaluated as Python, pickled vecnormalize.pkl, replay_buffer.pkl and SB3 model entries); only for "
        "files you trust",
    )
    return parser


def _peek_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The rl_zoo3 flags the zoo checks before handing them on (same names and defaults as rl_zoo3)."""
    usage = f"{prog} [options] (see {prog} -h)" if prog else None
    parser = argparse.ArgumentParser(prog=prog, usage=usage, add_help=False, allow_abbrev=False)
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("-i", "--trained-agent", default="")
    parser.add_argument("-optimize", "--optimize-hyperparameters", action="store_true")
    parser.add_argument("--gym-packages", type=str, nargs="+", default=[])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--num-threads", type=int, default=-1)
    parser.add_argument("-params", "--hyperparams", nargs="+", default=[])
    return parser


@contextlib.contextmanager
def _zoo_rl_zoo3(options: ZooOptions, argv: list[str], prog: str) -> Iterator[None]:
    """rl_zoo3's ``train`` with our experiment manager and ``prog argv...`` as its command line."""
    manager, saved_argv = rl_zoo3.train.ExperimentManager, sys.argv
    rl_zoo3.train.ExperimentManager = partial(DelayExperimentManager, zoo=options)  # type: ignore[misc,assignment]
    sys.argv = [prog, *argv]
    try:
        yield
    finally:
        rl_zoo3.train.ExperimentManager, sys.argv = manager, saved_argv  # type: ignore[misc]


def check_arguments(argv: Sequence[str], prog: str | None = None) -> ZooOptions:
    """The checks ``train`` runs on its command line before anything is made or written (algorithm, env, delay
    flags, ``-i``, ``--address``, ...): the zoo's options, or a :class:`ZooError` naming the bad value. The sweep
    runs them on every cell's command line before it starts one."""
    own, rest = zoo_parser(prog).parse_known_args(list(argv))
    return _check(own, _peek_parser(prog).parse_known_args(rest)[0])


def _check(own: argparse.Namespace, peek: argparse.Namespace) -> ZooOptions:
    load_algorithm(peek.algo)
    check_device_flag(peek.device)
    check_threads_flag(peek.num_threads)  # rl_zoo3 applies it
    import_gym_packages(peek.gym_packages)
    check_env_id(peek.env)
    flags = {field: getattr(own, name) for name, field in FLAG_FIELDS.items() if getattr(own, name) is not None}
    if own.preset is None:
        DelaySettings.from_dict(flags, "the delay flags")
    if own.pixels and env_kind(peek.env) != "dmc":
        raise ZooError(f"--pixels applies to dm_control/ ids, not to {peek.env!r}")
    if peek.trained_agent and not (peek.trained_agent.endswith(".zip") and os.path.isfile(peek.trained_agent)):
        raise ZooError(f"-i {peek.trained_agent!r} must be an existing .zip file")
    if peek.optimize_hyperparameters and peek.algo not in HYPERPARAMS_SAMPLER:
        raise ZooError(
            f"-optimize has no hyperparameter sampler for {peek.algo!r} (rl_zoo3 has: {sorted(HYPERPARAMS_SAMPLER)})"
        )
    if own.address is not None:
        try:
            check_address(own.address)
        except ValueError as error:
            raise ZooError(f"--address: {error}") from None
    typed = dict(item.split(":", 1) for item in peek.hyperparams if ":" in item)
    return ZooOptions(
        delay_flags=flags, preset=own.preset, pixels=own.pixels, trust_run_files=own.trust_run_files,
        address=own.address, typed_params=typed,
    )


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.train") -> int:
    """Run the zoo's train command line; return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    argv = list(sys.argv[1:] if argv is None else argv)

    def work() -> None:
        parser = zoo_parser(prog)
        own, rest = parser.parse_known_args(argv)
        if "-h" in rest or "--help" in rest:
            parser.print_help()
            print("\nrl_zoo3's flags (with our algorithms that import):\n")
            for name in OUR_ALGOS:
                with contextlib.suppress(ZooError):
                    load_algorithm(name)
            options = ZooOptions()
        else:
            options = check_arguments(argv, prog)
        with _zoo_rl_zoo3(options, rest, prog):
            rl_zoo3.train.train()

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
