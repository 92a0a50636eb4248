"""Test-wide settings: the repository root is importable, and torch uses one thread.

The suite's models are tiny, so one thread is faster than two on our 2-core machines (no
oversubscription when a test also steps an emulator) and timings vary less.
"""

import torch

torch.set_num_threads(1)
