"""PWM, the Parallel World Model agent."""

from delayzoo.agents.pwm.policies import PWMPolicy
from delayzoo.agents.pwm.pwm import PWM

__all__ = ["PWM", "PWMPolicy"]
