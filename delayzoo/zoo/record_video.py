"""Record a video of a trained agent of a zoo run, in the env it was trained in: rl_zoo3's ``record_video``.

::

    python -m delayzoo.zoo.record_video --algo ppo --env CartPole-v1 -f logs -n 500 [-o videos]

The first ``-n`` steps go to ``<run>/videos/<model>-<algo>-<env>-step-0-to-step-<n>.mp4`` (or ``-o``).
The env is rebuilt as in :mod:`delayzoo.zoo.enjoy`, which has the same flags (less ``--no-render``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from delayzoo.zoo import enjoy

__all__ = ["main"]


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.record_video") -> int:
    """Run the record_video command line; return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    return enjoy.main(argv, prog=prog, record=True)


if __name__ == "__main__":
    sys.exit(main())
