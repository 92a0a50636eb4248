"""DelayedEZ refuses observation delays: its forward model rolls only through an ExecutionDelay's queue."""

import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation


@pytest.mark.parametrize("with_execution_delay", [False, True])
def test_an_observation_delay_is_refused_naming_it(toy, tiny_mlp, with_execution_delay):
    def make():
        env = toy("vector")
        return PendingActionsObservation(ObservationDelay(ExecutionDelay(env, 2) if with_execution_delay else env, 2))

    with pytest.raises(ValueError, match="DelayedEZ does not handle an ObservationDelay"):
        DelayedEZ("MultiInputPolicy", make(), policy_kwargs=dict(net_kwargs=tiny_mlp))
    with pytest.raises(ValueError, match="ObservationDelay"):
        DelayedEZ("MultiInputPolicy", DummyVecEnv([make, make]), policy_kwargs=dict(net_kwargs=tiny_mlp))
