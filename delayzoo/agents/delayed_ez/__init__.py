"""DelayedEZ: EfficientZero with a forward model over the pending actions of an execution delay."""

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.policies import CnnPolicy, DelayedEZPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["CnnPolicy", "DelayedEZ", "DelayedEZPolicy", "MlpPolicy", "MultiInputPolicy"]
