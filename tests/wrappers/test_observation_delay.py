"""ObservationDelay: hand-computed traces, the rule against a plain reference loop, and its use under SB3."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import DQN, PPO, SAC

from delayzoo.wrappers import (
    ConstantDelay,
    ExecutionDelay,
    IIDDelay,
    ObservationDelay,
    PendingActionsObservation,
    RandomWalkDelay,
    TraceDelay,
)


class CountingEnv(gym.Env):
    """Observation: the step count; reward of step k: 10**(k-1), so a sum of rewards spells out its steps.

    Ends (terminated) after ``length`` steps; ``info["step"]`` is the step count.
    """

    def __init__(self, length: int = 6, action_space: spaces.Space | None = None) -> None:
        self.length = length
        self.action_space = action_space if action_space is not None else spaces.Discrete(10)
        self.observation_space = spaces.Box(0, 1000, shape=(1,), dtype=np.float32)
        self.executed: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.executed = []
        return np.zeros(1, dtype=np.float32), {"step": 0}

    def step(self, action):
        self.t += 1
        self.executed.append(action)
        obs = np.array([self.t], dtype=np.float32)
        return obs, float(10 ** (self.t - 1)), self.t >= self.length, False, {"step": self.t}


class ScriptedUniforms:
    """Stands in for the wrapper's generator: ``random()`` returns the listed numbers in turn."""

    def __init__(self, uniforms: list[float]) -> None:
        self.uniforms = list(uniforms)

    def random(self) -> float:
        return self.uniforms.pop(0)


def play(env: gym.Env, actions: list, seed: int | None = 0) -> list[tuple]:
    """``(shown step, reward, obs_delay, unobserved actions, arrived (step, reward, action), env's step)`` per step."""

    def row(obs, reward, info):
        arrived = [(int(o[0]), r, a) for o, r, a in info["arrived"]]
        return int(obs[0]), reward, info["obs_delay"], info["unobserved_actions"].tolist(), arrived, info["step"]

    obs, info = env.reset(seed=seed)
    rows = [row(obs, 0.0, info)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        rows.append(row(obs, reward, info))
        if terminated or truncated:
            break
    return rows


def test_constant_delay_trace_by_hand():
    env = ObservationDelay(CountingEnv(length=6), ConstantDelay(2))
    assert play(env, [3, 1, 4, 5, 9, 2]) == [
        (0, 0.0, 0, [0, 0], [], 0),
        (0, 0.0, 1, [3, 0], [], 1),
        (0, 0.0, 2, [3, 1], [], 2),
        (1, 1.0, 2, [1, 4], [(1, 1.0, 3)], 3),
        (2, 10.0, 2, [4, 5], [(2, 10.0, 1)], 4),
        (3, 100.0, 2, [5, 9], [(3, 100.0, 4)], 5),
        # terminated at step 6: everything arrives, with the final observation
        (6, 111000.0, 0, [0, 0], [(4, 1000.0, 5), (5, 10000.0, 9), (6, 100000.0, 2)], 6),
    ]


def test_random_walk_delay_trace_by_hand():
    # start 3; u < 0.25: -1, u < 0.5: +1, else unchanged -> d_1..d_8 = 3, 2, 1, 2, 1, 0, 1, 1
    env = ObservationDelay(CountingEnv(length=8), RandomWalkDelay(max_delay=3, p=0.25, start=3))
    env.delay_rng = ScriptedUniforms([0.9, 0.1, 0.1, 0.3, 0.1, 0.1, 0.3, 0.9])
    assert play(env, [3, 1, 4, 5, 9, 2, 6, 7], seed=None) == [
        (0, 0.0, 0, [0, 0, 0], [], 0),
        (0, 0.0, 1, [3, 0, 0], [], 1),  # s_1 = max(0, 1 - 3) = 0
        (0, 0.0, 2, [3, 1, 0], [], 2),  # s_2 = max(0, 2 - 2) = 0
        (2, 11.0, 1, [4, 0, 0], [(1, 1.0, 3), (2, 10.0, 1)], 3),  # s_3 = 3 - 1
        (2, 0.0, 2, [4, 5, 0], [], 4),  # s_4 = max(2, 4 - 2): nothing new, the same observation
        (4, 1100.0, 1, [9, 0, 0], [(3, 100.0, 4), (4, 1000.0, 5)], 5),
        (6, 110000.0, 0, [0, 0, 0], [(5, 10000.0, 9), (6, 100000.0, 2)], 6),
        (6, 0.0, 1, [6, 0, 0], [], 7),
        (8, 11000000.0, 0, [0, 0, 0], [(7, 1000000.0, 6), (8, 10000000.0, 7)], 8),
    ]


def test_trace_delay_trace_by_hand_and_truncation_delivers_everything():
    # the reset value 5 is drawn and not used; d_1..d_7 = 2, 2, 0, 3, 1, 1, 1 (the last entry repeats)
    trace = TraceDelay([5, 2, 2, 0, 3, 1], loop=False)
    env = ObservationDelay(gym.wrappers.TimeLimit(CountingEnv(length=100), max_episode_steps=7), trace)
    obs, info = env.reset(seed=0)
    rows = [(0, 0.0, False, False, 0, [])]
    for action in [1, 2, 3, 4, 5, 6, 7]:
        obs, reward, terminated, truncated, info = env.step(action)
        steps = [int(o[0]) for o, _, _ in info["arrived"]]
        rows.append((int(obs[0]), reward, terminated, truncated, info["obs_delay"], steps))
    assert rows == [
        (0, 0.0, False, False, 0, []),
        (0, 0.0, False, False, 1, []),
        (0, 0.0, False, False, 2, []),
        (3, 111.0, False, False, 0, [1, 2, 3]),  # the delay drops to 0: three steps arrive at once
        (3, 0.0, False, False, 1, []),
        (4, 1000.0, False, False, 1, [4]),
        (5, 10000.0, False, False, 1, [5]),
        (7, 1100000.0, False, True, 0, [6, 7]),
    ]
    assert info["unobserved_actions"].shape == (5,) and not info["unobserved_actions"].any()


def test_env_info_keys_of_the_current_step_pass_through():
    env = ObservationDelay(CountingEnv(), 2)
    _, info = env.reset(seed=0)
    assert set(info) == {"step", "obs_delay", "unobserved_actions", "arrived"}
    *_, info = env.step(1)
    assert info["step"] == 1 and info["obs_delay"] == 1


def reference(delays: list[int], actions: list[int], length: int) -> list[tuple]:
    """Shown step, reward, obs_delay, unobserved actions and arrived steps, straight from the rule."""
    rows, shown = [(0, 0.0, 0, [], [])], 0
    for t in range(1, min(len(actions), length) + 1):
        done = t == length
        s = t if done else max(shown, t - delays[t])
        rows.append((s, float(sum(10 ** (k - 1) for k in range(shown + 1, s + 1))), t - s, actions[s:t],
                     list(range(shown + 1, s + 1))))
        shown = s
        if done:
            break
    return rows


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_wrapper_follows_the_rule_for_any_delay_sequence(data):
    max_delay = data.draw(st.integers(0, 6))
    length = data.draw(st.integers(1, 14))
    steps = data.draw(st.integers(1, 16))
    delays = data.draw(st.lists(st.integers(0, max_delay), min_size=steps + 1, max_size=steps + 1))
    actions = data.draw(st.lists(st.integers(0, 9), min_size=steps, max_size=steps))
    env = ObservationDelay(CountingEnv(length), TraceDelay(delays, loop=False))  # delays[0] at reset, then in turn
    rows = [
        (shown, reward, obs_delay, unobserved[:obs_delay], [step for step, _, _ in arrived])
        for shown, reward, obs_delay, unobserved, arrived, _ in play(env, actions)
    ]
    assert rows == reference(delays, actions, length)


PROCESSES = [
    ConstantDelay(0),
    ConstantDelay(3),
    RandomWalkDelay(max_delay=5, p=0.4),
    RandomWalkDelay(max_delay=4, p=0.5, min_delay=1, start=2),
    IIDDelay([0, 2, 5], probs=[0.5, 0.3, 0.2]),
    TraceDelay([4, 0, 1, 3, 3, 2, 0]),
    TraceDelay([2, 5, 1], loop=False),
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PROCESSES), st.integers(0, 2**31), st.integers(1, 14))
def test_episode_return_and_length_are_the_undelayed_envs(process, seed, length):
    env = ObservationDelay(CountingEnv(length), process)
    obs, info = env.reset(seed=seed)
    shown, returned, steps, arrived = [0], 0.0, 0, []
    terminated = False
    rng = np.random.default_rng(seed)
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(10)))
        returned, steps = returned + reward, steps + 1
        shown.append(int(obs[0]))
        arrived += [(int(o[0]), r, a) for o, r, a in info["arrived"]]
        assert info["obs_delay"] == steps - shown[-1] <= process.max_delay
    assert (returned, steps) == (float(sum(10**k for k in range(length))), length)
    assert shown == sorted(shown)  # observations never go back in time
    executed = env.unwrapped.executed
    assert arrived == [(k, float(10 ** (k - 1)), executed[k - 1]) for k in range(1, length + 1)]  # each step once


def test_over_an_execution_delay_both_report_and_the_executed_action_arrives():
    env = ObservationDelay(ExecutionDelay(CountingEnv(length=10), 2), 1)
    _, info = env.reset(seed=0)
    assert {"delay", "pending_actions", "obs_delay", "unobserved_actions", "arrived"} <= set(info)
    infos = [env.step(a)[4] for a in (3, 1, 4, 5)]
    assert [info["executed_action"] for info in infos] == [0, 0, 3, 1]
    assert [[a for _, _, a in info["arrived"]] for info in infos] == [[], [0], [0], [3]]
    assert [info["unobserved_actions"].tolist() for info in infos] == [[0], [0], [3], [1]]
    assert [info["pending_actions"].tolist() for info in infos] == [[0, 3], [3, 1], [1, 4], [4, 5]]


def test_its_generator_is_its_own_and_seeded_runs_repeat_exactly():
    def run(seed):
        walk = RandomWalkDelay(4, p=0.5)
        env = ObservationDelay(ExecutionDelay(CountingEnv(length=60), walk), walk)
        return [(row[0], row[2]) for row in play(env, [1] * 59, seed=seed)], env

    (first, env), (again, _) = run(7), run(7)
    assert first == again and first != run(8)[0]
    assert len({obs_delay for _, obs_delay in first}) > 2
    execution = env.env
    assert execution.delay_rng.bit_generator.state != env.delay_rng.bit_generator.state
    alone = ObservationDelay(CountingEnv(), RandomWalkDelay(4, p=0.5))
    alone.reset(seed=7)
    ordered = ExecutionDelay(CountingEnv(), RandomWalkDelay(4, p=0.5))
    ordered.reset(seed=7)
    assert alone.delay_rng.random(8).tolist() != ordered.delay_rng.random(8).tolist()


@pytest.mark.parametrize("env_id, delay", [("CartPole-v1", RandomWalkDelay(3, p=0.3)), ("Pendulum-v1", 2)])
def test_gymnasium_env_checker_passes(env_id, delay):
    gym_check_env(ObservationDelay(gym.make(env_id), delay), skip_render_check=True)
    gym_check_env(PendingActionsObservation(ObservationDelay(ExecutionDelay(gym.make(env_id), 1), delay)),
                  skip_render_check=True)


def make_vector_member() -> gym.Env:
    return ObservationDelay(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(2)), RandomWalkDelay(3, p=0.4))


def test_a_sync_vector_env_steps_and_stacks_the_infos():
    envs = gym.vector.SyncVectorEnv([make_vector_member for _ in range(3)])
    _, info = envs.reset(seed=0)
    assert info["unobserved_actions"].shape == (3, 3) and info["obs_delay"].tolist() == [0, 0, 0]
    delays = []
    for _ in range(40):
        _, _, _, _, info = envs.step(np.ones(3, dtype=np.int64))
        assert info["unobserved_actions"].shape == (3, 3) and info["arrived"].shape == (3,)
        delays.append(info["obs_delay"])
    assert len({tuple(column) for column in np.array(delays).T}) == 3  # one delay path per env
    envs.close()


@pytest.mark.parametrize(
    "algorithm, env_id, view",
    [(PPO, "CartPole-v1", False), (PPO, "CartPole-v1", True), (DQN, "CartPole-v1", True), (SAC, "Pendulum-v1", True)],
)
def test_sb3_algorithms_learn_under_it(algorithm, env_id, view):
    env: gym.Env = ObservationDelay(ExecutionDelay(gym.make(env_id), RandomWalkDelay(2)), RandomWalkDelay(3))
    if view:
        env = PendingActionsObservation(env)
    kwargs = {"n_steps": 100, "batch_size": 50, "n_epochs": 1} if algorithm is PPO else {"learning_starts": 100}
    policy = "MultiInputPolicy" if view else "MlpPolicy"
    algorithm(policy, env, seed=0, device="cpu", **kwargs).learn(300)


@pytest.mark.parametrize(
    "make, error, fragment",
    [
        (lambda: ObservationDelay(CountingEnv(), -1), ValueError, "-1"),
        (lambda: ObservationDelay(CountingEnv(), 1.5), TypeError, "1.5"),
        (lambda: ObservationDelay(CountingEnv(), object()), TypeError, "max_delay"),
        (lambda: ObservationDelay(CountingEnv(action_space=spaces.MultiBinary(2)), 1), TypeError, "ObservationDelay"),
        (
            lambda: ExecutionDelay(ObservationDelay(CountingEnv(), 1), 1),
            ValueError,
            "ObservationDelay(ExecutionDelay(env",
        ),
        (
            lambda: ObservationDelay(PendingActionsObservation(ExecutionDelay(CountingEnv(), 1)), 1),
            ValueError,
            "PendingActionsObservation(ObservationDelay(env",
        ),
    ],
)
def test_bad_arguments_and_the_wrong_order_raise_naming_them(make, error, fragment):
    with pytest.raises(error, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        make()


def test_an_action_outside_the_space_is_refused_naming_it():
    env = ObservationDelay(CountingEnv(action_space=spaces.Discrete(4)), 1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action 7 is outside"):
        env.step(7)


class ReusingEnv(gym.Env):
    """Writes every observation into the same buffers, as simulators and fast vector envs do: the step count in a
    ``Box``, or in each part of a ``Dict`` or ``Tuple`` (arrays reused, and a plain number beside them)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        box = spaces.Box(0, 1000, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.buffer = np.zeros(2, dtype=np.float32)
        self.inner = np.zeros((1, 1), dtype=np.float32)
        if kind == "box":
            self.observation_space = box
        elif kind == "dict":
            inner = spaces.Dict({"grid": spaces.Box(0, 1000, shape=(1, 1), dtype=np.float32)})
            self.observation_space = spaces.Dict({"position": box, "nested": inner, "count": spaces.Discrete(1000)})
        else:
            self.observation_space = spaces.Tuple((box, spaces.Box(0, 1000, shape=(1, 1), dtype=np.float32)))

    def _observation(self):
        self.buffer[:] = self.t
        self.inner[:] = self.t
        if self.kind == "box":
            return self.buffer
        if self.kind == "dict":
            return {"position": self.buffer, "nested": {"grid": self.inner}, "count": self.t}
        return self.buffer, self.inner

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action):
        self.t += 1
        return self._observation(), 1.0, self.t >= 30, False, {}


def _steps_of(observation, kind: str) -> set[int]:
    """The step counts an observation holds (one, if it was kept by value)."""
    if kind == "box":
        return {int(value) for value in observation}
    if kind == "dict":
        return {int(observation["count"]), *map(int, observation["position"]), int(observation["nested"]["grid"][0, 0])}
    return {*map(int, observation[0]), int(observation[1][0, 0])}


@pytest.mark.parametrize("kind", ["box", "dict", "tuple"])
@pytest.mark.parametrize("execution_delay", [False, True], ids=["alone", "over-an-execution-delay"])
@pytest.mark.parametrize("delay", [ConstantDelay(3), RandomWalkDelay(4, p=0.3)], ids=["constant-3", "random-walk-4"])
def test_held_back_observations_keep_the_values_of_their_step_when_the_env_reuses_its_buffers(
    kind, execution_delay, delay
):
    env: gym.Env = ReusingEnv(kind)
    if execution_delay:
        env = ExecutionDelay(env, RandomWalkDelay(2))
    env = ObservationDelay(env, delay)
    observation, info = env.reset(seed=0)
    assert _steps_of(observation, kind) == {0}
    shown, t, done = 0, 0, False
    while not done:
        t += 1
        observation, _, terminated, truncated, info = env.step(1)
        done = terminated or truncated
        arrived = [_steps_of(obs, kind) for obs, _, _ in info["arrived"]]
        assert arrived == [{step} for step in range(shown + 1, shown + 1 + len(arrived))]  # each at its own step
        shown += len(arrived)
        assert _steps_of(observation, kind) == {shown} and info["obs_delay"] == t - shown
    assert shown == t == 30
    if isinstance(delay, ConstantDelay):  # the delay did not vanish: step 4 showed step 1
        env.reset(seed=1)
        for _ in range(4):
            observation, *_ = env.step(0)
        assert _steps_of(observation, kind) == {1}


def test_what_the_user_is_given_is_theirs_to_change():
    env = ObservationDelay(ReusingEnv("dict"), ConstantDelay(2))
    env.reset(seed=0)
    for _ in range(3):
        observation, _, _, _, info = env.step(0)
    observation["position"][:] = -1
    info["arrived"][0][0]["position"][:] = -5
    again, *_ = env.step(0)  # step 2 arrives; step 1, shown before, was the user's to change
    assert _steps_of(again, "dict") == {2}
