"""Test-wide settings: the repository root is importable, torch uses one thread, and Ray stays on loopback.

The suite's models are tiny, so one thread is faster than two on our 2-core machines (no
oversubscription when a test also steps an emulator) and timings vary less. Ray 2.60 takes the network
interface's address as its node IP unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before it is
imported (then every listener binds 127.0.0.1; DESIGN.md section 7).
"""

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import torch  # noqa: E402

torch.set_num_threads(1)
