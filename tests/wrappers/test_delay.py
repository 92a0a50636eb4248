"""ExecutionDelay against a plain reference loop written from the rule in DESIGN.md section 3."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from delayzoo.wrappers import (
    ActionQueue,
    ConstantDelay,
    ExecutionDelay,
    IIDDelay,
    ObservationDelay,
    RandomWalkDelay,
)


class RecordingEnv(gym.Env):
    """Counts steps and remembers every action it executes."""

    def __init__(self, action_space: spaces.Space | None = None) -> None:
        self.action_space = action_space if action_space is not None else spaces.Discrete(100)
        self.observation_space = spaces.Box(0, np.inf, shape=(1,), dtype=np.float32)
        self.executed: list = []
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.executed = []
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.executed.append(action)
        return np.array([len(self.executed)], dtype=np.float32), 0.0, False, False, {}


class ScriptedDelay:
    """A delay process that plays back a fixed list of delays."""

    def __init__(self, delays: list[int], max_delay: int) -> None:
        self.delays = delays
        self.max_delay = max_delay
        self.i = 0

    def reset(self, rng):
        self.i = 0
        return self.delays[0]

    def step(self, rng):
        self.i += 1
        return self.delays[self.i]


def reference_run(max_delay: int, delays: list[int], actions: list[int], filler: int = 0):
    """Executed actions and pending forecasts, straight from the rule, with no cleverness."""
    decisions = [(j, max_delay, filler) for j in range(-max_delay, 0)]
    executed, pending = [], []
    for t, (d, a) in enumerate(zip(delays, actions)):
        pending.append([max((j, x) for j, dj, x in decisions if j + dj <= s)[1] for s in range(t, t + d)])
        decisions.append((t, d, a))
        executed.append(max((j, x) for j, dj, x in decisions if j + dj <= t)[1])
    return executed, pending


@st.composite
def delay_scripts(draw, max_delay_max: int = 6, smooth: bool = False):
    max_delay = draw(st.integers(0, max_delay_max))
    n = draw(st.integers(1, 30))
    if smooth:
        delays = [draw(st.integers(0, max_delay))]
        for _ in range(n):
            delays.append(draw(st.integers(max(delays[-1] - 1, 0), max_delay)))
    else:
        delays = draw(st.lists(st.integers(0, max_delay), min_size=n + 1, max_size=n + 1))
    actions = draw(st.lists(st.integers(1, 99), min_size=n, max_size=n))
    return max_delay, delays, actions


def run_wrapper(max_delay: int, delays: list[int], actions: list[int]):
    env = ExecutionDelay(RecordingEnv(), ScriptedDelay(delays, max_delay))
    _, info = env.reset(seed=0)
    pending = [info["pending_actions"][: info["delay"]].tolist()]
    reported = []
    for a in actions:
        *_, info = env.step(a)
        reported.append(info["executed_action"])
        pending.append(info["pending_actions"][: info["delay"]].tolist())
    return env.unwrapped.executed, reported, pending


@settings(max_examples=300, deadline=None)
@given(delay_scripts())
def test_executed_actions_follow_the_rule_for_any_delay_sequence(script):
    max_delay, delays, actions = script
    executed, reported, pending = run_wrapper(max_delay, delays, actions)
    expected_executed, expected_pending = reference_run(max_delay, delays, actions)
    assert executed == expected_executed
    assert reported == expected_executed
    assert pending[: len(actions)] == expected_pending


@settings(max_examples=200, deadline=None)
@given(delay_scripts(smooth=True))
def test_pending_actions_are_exactly_what_executes_when_delay_falls_at_most_one_per_step(script):
    max_delay, delays, actions = script
    executed, _, pending = run_wrapper(max_delay, delays, actions)
    for t, forecast in enumerate(pending[: len(actions)]):
        horizon = executed[t : t + len(forecast)]
        assert forecast[: len(horizon)] == horizon


def test_constant_delay_executes_the_action_from_max_delay_steps_ago():
    env = ExecutionDelay(RecordingEnv(), 3)
    env.reset(seed=0)
    for a in range(1, 11):
        env.step(a)
    assert env.unwrapped.executed == [0, 0, 0, 1, 2, 3, 4, 5, 6, 7]


def test_delay_drop_lets_a_newer_action_overtake_an_older_one():
    # a_0=10 with delay 3 (due at 3), a_1=11 with delay 1 (due at 2), a_2=12 with delay 0 (due at 2)
    executed, _, _ = run_wrapper(3, [3, 1, 0, 0, 0], [10, 11, 12, 13])
    assert executed == [0, 0, 12, 13]
    assert 10 not in executed and 11 not in executed


def test_delay_rise_repeats_the_previous_executed_action():
    # a_0 due at 0, a_1 due at 1 + 3 = 4: steps 1..3 have nothing new due and repeat a_0.
    executed, _, _ = run_wrapper(3, [0, 3, 3, 3, 3, 3], [10, 11, 12, 13, 14])
    assert executed == [10, 10, 10, 10, 11]


def test_zero_delay_executes_the_action_at_once():
    executed, _, pending = run_wrapper(4, [0] * 6, [5, 6, 7, 8, 9])
    assert executed == [5, 6, 7, 8, 9]
    assert all(p == [] for p in pending)


def test_max_delay_zero_is_a_pass_through():
    base = gym.make("CartPole-v1")
    wrapped = ExecutionDelay(gym.make("CartPole-v1"), 0)
    obs_a, _ = base.reset(seed=3)
    obs_b, info = wrapped.reset(seed=3)
    assert info["delay"] == 0 and info["pending_actions"].shape == (0,)
    np.testing.assert_array_equal(obs_a, obs_b)
    for a in [0, 1, 1, 0, 1, 0, 0]:
        out_a, out_b = base.step(a), wrapped.step(a)
        np.testing.assert_array_equal(out_a[0], out_b[0])
        assert out_a[1:4] == out_b[1:4] and out_b[4]["executed_action"] == a


def test_reset_in_the_middle_of_a_queue_drops_the_old_actions():
    env = ExecutionDelay(RecordingEnv(), 3)
    env.reset(seed=0)
    for a in [1, 2, 3]:
        env.step(a)
    _, info = env.reset()
    assert info["pending_actions"].tolist() == [0, 0, 0]
    for a in [7, 8, 9, 10]:
        env.step(a)
    assert env.unwrapped.executed == [0, 0, 0, 7]


def test_info_reports_delay_and_pending_on_reset_and_step():
    env = ExecutionDelay(RecordingEnv(), ConstantDelay(2))
    _, info = env.reset(seed=0)
    assert info["delay"] == 2 and info["pending_actions"].tolist() == [0, 0] and "executed_action" not in info
    *_, info = env.step(5)
    assert info == {"delay": 2, "executed_action": 0, "pending_actions": info["pending_actions"]}
    assert info["pending_actions"].tolist() == [0, 5]


@pytest.mark.parametrize(
    "space, action",
    [
        (spaces.MultiDiscrete([3, 4]), np.array([2, 3])),
        (spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), np.array([0.5, -0.25], dtype=np.float32)),
    ],
)
def test_multidiscrete_and_box_actions_are_delayed_whole(space, action):
    env = ExecutionDelay(RecordingEnv(space), 2)
    _, info = env.reset(seed=0)
    assert info["pending_actions"].shape == (2, 2)
    np.testing.assert_array_equal(info["pending_actions"], np.zeros((2, 2)))
    for _ in range(3):
        *_, info = env.step(action)
    executed = env.unwrapped.executed
    np.testing.assert_array_equal(executed[0], np.zeros(2))
    np.testing.assert_array_equal(executed[2], action)
    np.testing.assert_array_equal(info["pending_actions"], np.stack([action, action]))


def test_random_init_action_is_drawn_from_the_seeded_action_space():
    def fillers(seed):
        env = ExecutionDelay(RecordingEnv(spaces.Discrete(100)), 8, init_action="random")
        return env.reset(seed=seed)[1]["pending_actions"].tolist()

    assert fillers(1) == fillers(1)
    assert fillers(1) != fillers(2)
    assert len(set(fillers(1))) > 1


def test_fixed_and_callable_init_actions_fill_the_queue():
    env = ExecutionDelay(RecordingEnv(), 2, init_action=7)
    assert env.reset(seed=0)[1]["pending_actions"].tolist() == [7, 7]
    env = ExecutionDelay(RecordingEnv(), 2, init_action=lambda obs: int(obs[0]) + 4)
    assert env.reset(seed=0)[1]["pending_actions"].tolist() == [4, 4]
    assert env.unwrapped.resets == 1


def test_random_walk_delay_is_reproducible_per_seed_and_independent_per_env():
    def path(seed):
        env = ExecutionDelay(RecordingEnv(), RandomWalkDelay(max_delay=5, p=0.3))
        _, info = env.reset(seed=seed)
        return [info["delay"]] + [env.step(1)[4]["delay"] for _ in range(200)]

    assert path(0) == path(0)
    assert path(0) != path(1)

    shared = RandomWalkDelay(max_delay=5, p=0.3)
    envs = [ExecutionDelay(RecordingEnv(), shared) for _ in range(2)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    paths = [[env.step(1)[4]["delay"] for _ in range(200)] for env in envs]
    assert paths[0] == path(0)[1:] and paths[1] == path(1)[1:]


@pytest.mark.parametrize("p", [0.05, 0.2, 0.5])
def test_random_walk_step_frequencies_match_p(p):
    process = RandomWalkDelay(max_delay=1000, p=p, start=500)
    rng = np.random.default_rng(0)
    delays = [process.reset(rng)] + [process.step(rng) for _ in range(40_000)]
    changes = np.diff(delays)
    n = len(changes)
    for direction in (-1, 1):
        freq = np.mean(changes == direction)
        assert abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9
    assert np.all(np.abs(changes) <= 1)


def test_random_walk_stays_within_bounds_and_restarts_on_reset():
    process = RandomWalkDelay(max_delay=4, p=0.5, min_delay=2, start=3)
    rng = np.random.default_rng(1)
    assert process.reset(rng) == 3
    walk = [process.step(rng) for _ in range(500)]
    assert set(walk) == {2, 3, 4}
    assert process.reset(rng) == 3


def test_iid_delay_draws_its_values_with_their_probabilities():
    process = IIDDelay([0, 3], probs=[0.25, 0.75])
    rng = np.random.default_rng(0)
    draws = np.array([process.step(rng) for _ in range(20_000)])
    assert set(draws.tolist()) == {0, 3}
    assert abs(np.mean(draws == 0) - 0.25) < 0.02
    assert process.max_delay == 3


def test_action_queue_matches_its_docstring_example():
    queue = ActionQueue(max_delay=2)
    queue.reset([7, 8])
    assert [queue.push(a, 2) for a in (1, 2, 3)] == [7, 8, 1]
    assert queue.forecast(2).tolist() == [2, 3]


@pytest.mark.parametrize(
    "make, error, fragment",
    [
        (lambda: ConstantDelay(-1), ValueError, "-1"),
        (lambda: ConstantDelay(1.5), TypeError, "1.5"),
        (lambda: ExecutionDelay(RecordingEnv(), -2), ValueError, "-2"),
        (lambda: ExecutionDelay(RecordingEnv(), 2.0), TypeError, "2.0"),
        (lambda: RandomWalkDelay(5, p=0.6), ValueError, "0.6"),
        (lambda: RandomWalkDelay(5, p=-0.1), ValueError, "-0.1"),
        (lambda: RandomWalkDelay(3, min_delay=4), ValueError, "min_delay=4"),
        (lambda: RandomWalkDelay(3, start=7), ValueError, "7"),
        (lambda: IIDDelay([1, 2], probs=[0.9, 0.3]), ValueError, "0.9"),
        (lambda: IIDDelay([1, -3]), ValueError, "-3"),
        (lambda: ExecutionDelay(RecordingEnv(), 2, init_action="zeros"), ValueError, "zeros"),
        (lambda: ExecutionDelay(RecordingEnv(), 2, init_action=100), ValueError, "100"),
        (lambda: ExecutionDelay(RecordingEnv(), object()), TypeError, "max_delay"),
        (
            lambda: ExecutionDelay(RecordingEnv(spaces.Box(1.0, 2.0, shape=(1,))), 2),
            ValueError,
            "init_action='random'",
        ),
        (lambda: ExecutionDelay(RecordingEnv(spaces.MultiBinary(3)), 2), TypeError, "MultiBinary"),
    ],
)
def test_bad_arguments_raise_errors_that_name_the_value(make, error, fragment):
    with pytest.raises(error, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        make()


def test_action_outside_the_space_raises_and_names_it():
    env = ExecutionDelay(RecordingEnv(spaces.Discrete(4)), 1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action 9 is outside"):
        env.step(9)
    box = ExecutionDelay(RecordingEnv(spaces.Box(-1.0, 1.0, shape=(2,))), 1)
    box.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        box.step(np.array([3.0, 0.0], dtype=np.float32))


@pytest.mark.parametrize("wrapper", [ExecutionDelay, ObservationDelay])
@pytest.mark.parametrize("bad", [7, -1, 2.5])
def test_a_custom_process_returning_a_bad_delay_is_refused(bad, wrapper):
    env = wrapper(RecordingEnv(), ScriptedDelay([1, bad], max_delay=3))
    env.reset(seed=0)
    with pytest.raises((ValueError, TypeError), match=str(bad).replace(".", r"\.")):
        env.step(1)
