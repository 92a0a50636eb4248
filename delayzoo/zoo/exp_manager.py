"""rl_zoo3's experiment manager, with execution delays, our env factories and checks before writing.

:class:`DelayExperimentManager` keeps rl_zoo3's flow (``setup_experiment`` -> ``learn`` ->
``save_trained_model``) and changes what the zoo needs:

- hyperparameters come from our ``delayzoo/hyperparams/`` files, with presets and DeepMind Control
  fallbacks, then from rl_zoo3's files for what ours do not cover (:mod:`delayzoo.zoo.hyperparams`);
  an entry's ``delay:`` mapping sets the delay, which the command-line delay flags override; the
  effective delay is written to ``args.yml`` and ``config.yml``;
- an algorithm with a ``delay_mode`` argument (PWM) runs in ``"forecast"`` mode with the pending view
  and ``"oblivious"`` without, unless the entry or ``-params`` sets it; config.yml records it;
- envs are built by :func:`delayzoo.zoo.envs.make_zoo_env` (statistics at the base, delay on top);
  ``config.yml`` lists :mod:`delayzoo.zoo.rl_zoo3_wrappers`'s entry first under ``env_wrapper``, so rl_zoo3's
  ``enjoy`` and ``record_video`` replay the run under the same delay (or refuse, for ALE and DeepMind
  Control runs);
- every check runs before the log folder is created: hyperparameters the algorithm's constructor does
  not take, delay settings that contradict each other, a resume file of another algorithm or env; and
  if setting up still fails, the folders it created are removed, so nothing half-written stays;
- ``-i model.zip`` continues the step counter, with the replay buffer and normalisation statistics
  saved with that model (a final model or a checkpoint); Ctrl-C and SIGTERM save the model and the
  replay buffer; every model, replay buffer and statistics file is written atomically, the model last
  (:mod:`delayzoo.zoo.checkpoints`);
- nothing in a hyperparameter file or a run folder runs code unless ``--trust-run-files`` is given
  (:mod:`delayzoo.zoo.trust`; normalisation statistics are plain ``.npz`` arrays, a pickled
  ``vecnormalize.pkl`` is refused; SB3 model files are loaded without their pickled entries
  (:mod:`delayzoo.zoo.sb3_files`); replay buffers are plain ``.npz`` arrays where they can be (our
  agents', SB3's ``ReplayBuffer`` and ``DictReplayBuffer``), and the pickled ones are refused
  (:mod:`delayzoo.zoo.buffers`)).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import os
import shutil
import warnings
import zipfile
from functools import partial
from pathlib import Path
from pprint import pprint
from typing import Any

import gymnasium as gym
from rl_zoo3.callbacks import ParallelTrainCallback, SaveVecNormalizeCallback
from rl_zoo3.exp_manager import ExperimentManager
from rl_zoo3.utils import ALGOS
from sb3_contrib import TQC
from sb3_contrib.common.vec_env import AsyncEval
from stable_baselines3 import SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback, EvalCallback
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from delayzoo.agents.common.evaluation import LifeLossEpisodeStarts
from delayzoo.agents.common.plain_save import MAX_DATA_BYTES, NotAModelFileError, PlainSaveMixin
from delayzoo.zoo.buffers import buffer_suffix, load_buffer, save_buffer
from delayzoo.zoo.checkpoints import (
    AtomicCheckpointCallback,
    SaveBestModelCallback,
    SaveNormalizationCallback,
    TerminateAsInterrupt,
    atomic_write,
    checkpoint_files,
    load_normalization,
    save_normalization,
)
from delayzoo.zoo.delay_settings import FLAG_FIELDS, DelaySettings
from delayzoo.zoo.envs import check_env_id, env_kind
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.hyperparams import find_entry
from delayzoo.zoo.rl_zoo3_wrappers import replay_entry
from delayzoo.zoo.runs import is_plain_data, read_run_yaml
from delayzoo.zoo.sb3_files import load_sb3_model
from delayzoo.zoo.trust import parse_kwargs, safe_hyperparams
from delayzoo.zoo.vec_envs import make_ranked_env, split_frame_stack, stack_and_transpose

__all__ = ["DelayExperimentManager", "ZooOptions"]

SET_BY_THE_ZOO = {
    "env": "--env",
    "seed": "--seed",
    "device": "--device",
    "verbose": "--verbose",
    "tensorboard_log": "-tb",
    "ray_address": "--address",
    "delay": "the delay flags (--delay, --delay-process, --obs-delay, ...) or a delay: entry in the YAML file",
}
"""Names the zoo sets itself (constructor arguments, the delay), with the flag that sets each."""


@dataclasses.dataclass(frozen=True)
class ZooOptions:
    """What the zoo's own flags say, beyond rl_zoo3's.

    :param delay_flags: the delay flags given on the command line, as ``DelaySettings`` fields
    :param preset: the ``--preset`` name, or ``None``
    :param pixels: ``--pixels`` (DeepMind Control tasks as images)
    :param trust_run_files: ``--trust-run-files`` (import any name, evaluate keyword strings, unpickle
        ``vecnormalize.pkl``: rl_zoo3's behaviour)
    :param address: ``--address``: the Ray cluster of an algorithm's actors (DelayedEZ's ``ray_address``)
    :param typed_params: the ``-params`` values as the user typed them (key -> text), recorded in the run files
        in place of what rl_zoo3 evaluated them to when that is not plain data (a class, a tuple)
    """

    delay_flags: dict[str, Any] = dataclasses.field(default_factory=dict)
    preset: str | None = None
    pixels: bool = False
    trust_run_files: bool = False
    address: str | None = None
    typed_params: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _FinalUpdates:
    """An entry's ``final_updates`` (updates after the last env step) and the ``n_timesteps`` they were set for.

    They follow the run, as EfficientZero's 20k final updates follow its 100k steps: a run of other
    length (``-n``) gets them scaled by its total planned steps (a resume counts the steps already
    taken, so ``-i ... -n <remaining>`` keeps the original run's number); a value set with ``-params``
    is kept as given. (The agent runs none when the run makes no update.)
    """

    updates: int = 0
    steps: int = 0

    @classmethod
    def from_entry(cls, entry: dict[str, Any], custom: dict[str, Any] | None) -> _FinalUpdates:
        updates, steps = entry.get("final_updates"), entry.get("n_timesteps")
        if "final_updates" in (custom or {}) or not updates or not steps:
            return cls()
        return cls(int(updates), int(float(steps)))

    def for_run(self, planned_steps: int) -> int | None:
        """The final updates of a run of ``planned_steps``, or ``None`` when they are not scaled."""
        if not self.updates:
            return None
        return round(self.updates * planned_steps / self.steps)


def _policy_modules(algorithm: type[BaseAlgorithm]) -> set[str]:
    return {policy.__module__ for policy in getattr(algorithm, "policy_aliases", {}).values()}


class DelayExperimentManager(ExperimentManager):
    """rl_zoo3's ``ExperimentManager`` for delayed envs and our agents (see the module docstring).

    Takes rl_zoo3's arguments, plus:

    :param zoo: the zoo's own options (delay flags, preset, pixels)
    """

    def __init__(self, args: Any, algo: str, env_id: str, *positional: Any, zoo: ZooOptions, **kwargs: Any) -> None:
        check_env_id(env_id)
        super().__init__(args, algo, env_id, *positional, **kwargs)
        self.zoo = zoo
        self.kind = env_kind(self.env_name.gym_id)
        self.delay = DelaySettings()
        self.interrupted = False
        self._terminate = TerminateAsInterrupt()
        self._created: Path | None = None
        self._custom_config: str | None = kwargs.get("config") or None
        self._python_config = False
        self._final_updates = _FinalUpdates()
        self._saved_hyperparams: dict[str, Any] = {}
        self._self_play_actors = 0

    # ------------------------------------------------------------------ set-up
    def setup_experiment(self) -> tuple[BaseAlgorithm, dict[str, Any]] | None:
        """rl_zoo3's set-up; on failure the folders it created are removed and bad input (``ValueError``,
        ``TypeError``, ``AssertionError``, Gymnasium's errors such as ``InvalidBound``) becomes a :class:`ZooError`."""
        try:
            return super().setup_experiment()
        except BaseException as error:
            self._remove_created()
            if isinstance(error, NotAModelFileError):
                raise ZooError(str(error)) from error
            if isinstance(error, (ValueError, TypeError, AssertionError, gym.error.Error)) and not isinstance(
                error, ZooError
            ):
                raise ZooError(f"{type(error).__name__}: {error}") from error
            raise

    def read_hyperparameters(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The entry for this run (see :mod:`delayzoo.zoo.hyperparams`), its ``delay:`` merged with the flags."""
        entry = find_entry(
            self.algo, self.env_name.gym_id, self.kind, self.zoo.preset, self.zoo.pixels, self._custom_config
        )
        key, hyperparams, self.config = entry.key, entry.hyperparams, str(entry.path)
        self._python_config = entry.python
        print(f"Loading hyperparameters from: {self.config} (entry {key!r})")
        entry_delay = hyperparams.pop("delay", None) or {}
        if not isinstance(entry_delay, dict):
            raise ZooError(f"the delay entry of {key!r} in {self.config} must be a mapping, got {entry_delay!r}")
        base = DelaySettings.from_dict(entry_delay, f"the delay entry of {key!r} in {self.config}")
        source = "the delay flags" + (f" and the delay entry of {key!r}" if entry_delay else "")
        self.delay = DelaySettings.from_dict(base.merged(self.zoo.delay_flags), source).resolved()

        if self.storage and self.study_name and self.trial_id:
            print("Loading from Optuna study...")
            hyperparams.update(self.load_trial(self.storage, self.study_name, self.trial_id))
        self._final_updates = _FinalUpdates.from_entry(hyperparams, self.custom_hyperparams)
        if self.custom_hyperparams is not None:
            hyperparams.update(self.custom_hyperparams)
        upgrade = getattr(ALGOS[self.algo], "upgrade_settings", None)
        if upgrade is not None:  # our agents: keywords of earlier versions, as this one takes them
            hyperparams = upgrade(hyperparams, f"the hyperparameters of {key!r} ({self.config}) and -params")
        actor_kwargs = hyperparams.get("actor_kwargs")
        if isinstance(actor_kwargs, str):
            actor_kwargs = parse_kwargs(actor_kwargs, f"actor_kwargs in {self.config}")
        if isinstance(actor_kwargs, dict) and "ray_address" in actor_kwargs:
            raise ZooError("hyperparameter 'ray_address' is set by the zoo; use --address instead")
        if self.zoo.address is not None:
            if "actor_kwargs" not in inspect.signature(ALGOS[self.algo].__init__).parameters:
                raise ZooError(f"--address names the Ray cluster of actors, which --algo {self.algo} does not use")
            hyperparams["actor_kwargs"] = {**(actor_kwargs or {}), "ray_address": self.zoo.address}
        if "env_kwargs" in hyperparams and self.env_kwargs:
            hyperparams["env_kwargs"] = self.env_kwargs
        takes_delay_mode = "delay_mode" in inspect.signature(ALGOS[self.algo].__init__).parameters
        if takes_delay_mode and "delay_mode" not in hyperparams:
            hyperparams["delay_mode"] = "forecast" if self.delay.pending_view else "oblivious"
            view = "with" if self.delay.pending_view else "without"
            print(f"delay_mode: {hyperparams['delay_mode']!r} (the default {view} --pending-view)")
        if self.delay.pending_view and hyperparams.get("policy") in ("MlpPolicy", "CnnPolicy"):
            print(f"--pending-view gives Dict observations: using MultiInputPolicy instead of {hyperparams['policy']}")
            hyperparams["policy"] = "MultiInputPolicy"
        if self.delay.pending_view and hyperparams.get("optimize_memory_usage"):
            print(
                "--pending-view gives Dict observations, "
                "which SB3's DictReplayBuffer stores without optimize_memory_usage"
            )
            hyperparams["optimize_memory_usage"] = False

        record = self.delay.to_record()
        for name, field in FLAG_FIELDS.items():
            if field in record:  # the trace and the observation delay are recorded when there are some
                setattr(self.args, name, record[field])
        for name, value in (
            ("preset", self.zoo.preset),
            ("pixels", self.zoo.pixels),
            ("hyperparams_entry", key),
            ("hyperparams_file", self.config),
            ("resume_timesteps", 0),
        ):
            setattr(self.args, name, value)
        saved_hyperparams = {name: hyperparams[name] for name in sorted(hyperparams)}
        self._saved_hyperparams = saved_hyperparams  # config.yml: final_updates as scaled for this run
        saved_hyperparams["delay"] = record
        replay = replay_entry(self.kind, self.delay, normalized=bool(hyperparams.get("normalize")))
        if replay is not None:  # what rl_zoo3's enjoy and record_video need to replay the run (or refuse)
            wrappers = hyperparams.get("env_wrapper") or []
            saved_hyperparams["env_wrapper"] = [replay, *(wrappers if isinstance(wrappers, list) else [wrappers])]
        print(f"Delay: {self.delay.label()}")
        print("Hyperparameters:")
        pprint(saved_hyperparams)
        return hyperparams, saved_hyperparams

    def _recorded(self, hyperparams: dict[str, Any]) -> dict[str, Any]:
        """``hyperparams`` as the run files record them: a ``-params`` value that rl_zoo3 evaluated to something
        other than plain data (``policy_kwargs:dict(activation_fn=nn.ReLU)``) is the text the user typed, as a
        YAML entry would hold it, so that eval, enjoy and a resume read the run without ``--trust-run-files``."""
        recorded = dict(hyperparams)
        for key, text in self.zoo.typed_params.items():
            if key in recorded and not is_plain_data(recorded[key]):
                recorded[key] = text
        return recorded

    def _save_config(self, saved_hyperparams: dict[str, Any]) -> None:
        """rl_zoo3's ``config.yml`` and ``args.yml``, holding plain data only (see :meth:`_recorded`)."""
        typed = getattr(self.args, "hyperparams", None)
        if typed:
            self.args.hyperparams = self._recorded(typed)
        try:
            super()._save_config(self._recorded(saved_hyperparams))
        finally:
            if typed:
                self.args.hyperparams = typed

    def _preprocess_hyperparams(self, hyperparams: dict[str, Any]) -> Any:
        if "n_timesteps" not in hyperparams:
            if self.n_timesteps <= 0:
                raise ZooError(f"the hyperparameters from {self.config} have no n_timesteps: add it or pass -n STEPS")
            hyperparams = {**hyperparams, "n_timesteps": self.n_timesteps}  # rl_zoo3 expects the key
        typed = set(self.custom_hyperparams or {})  # -params: what the user typed is not checked
        from_files = {name: value for name, value in hyperparams.items() if name not in typed}
        trusted = self.zoo.trust_run_files or self._python_config
        hyperparams = {**hyperparams, **safe_hyperparams(from_files, str(self.config), trusted)}
        processed = super()._preprocess_hyperparams(hyperparams)
        self._check_constructor_keys(processed[0])
        self._self_play_actors = int((processed[0].get("actor_kwargs") or {}).get("self_play_actors") or 0)
        if self._self_play_actors and self.normalize:
            raise ZooError(
                "self_play_actors cannot be used with normalize: the actors would each keep their own statistics"
            )
        if not self.continue_training:  # a resumed run scales them once its step counter is read
            self._scale_final_updates(processed[0], self.n_timesteps)
        if self._eval_env_kwargs_args is None:
            self.eval_env_kwargs = self.env_kwargs
        return processed

    def _scale_final_updates(self, hyperparams: dict[str, Any], planned_steps: int) -> bool:
        """Set ``hyperparams["final_updates"]`` (and config.yml's) for a run of ``planned_steps`` in all;
        ``True`` when it changed (see :class:`_FinalUpdates`)."""
        scaled = self._final_updates.for_run(planned_steps)
        if scaled is None or scaled == hyperparams.get("final_updates"):
            return False
        print(
            f"final_updates: {scaled} (the entry's {self._final_updates.updates} for its "
            f"{self._final_updates.steps:,} steps, scaled to this run's {planned_steps:,} steps)"
        )
        hyperparams["final_updates"] = self._saved_hyperparams["final_updates"] = scaled
        return True

    def _check_constructor_keys(self, hyperparams: dict[str, Any]) -> None:
        algorithm = ALGOS[self.algo]
        parameters = inspect.signature(algorithm.__init__).parameters
        keys = set(hyperparams) - {"noise_type", "noise_std"}
        if "noise_type" in hyperparams:
            keys.add("action_noise")
        reserved = sorted(keys & set(SET_BY_THE_ZOO))
        if reserved:
            name = reserved[0]
            raise ZooError(f"hyperparameter {name!r} is set by the zoo; use {SET_BY_THE_ZOO[name]} instead")
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()) and not hasattr(
            algorithm, "upgrade_settings"
        ):  # our agents take only former keywords there, already moved by upgrade_settings
            return
        accepted = set(parameters) - {"self"}
        unknown = sorted(keys - accepted)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(accepted), n=2)
            hint = f"; did you mean {' or '.join(repr(other) for other in close)}?" if close else ""
            raise ZooError(f"hyperparameter {unknown[0]!r} is not an argument of {algorithm.__name__}{hint}")

    def _check_resume(self) -> None:
        """A resume file must come from a run of the same algorithm and env."""
        if not self.trained_agent:
            return
        path = Path(self.trained_agent)
        if not (path.suffix == ".zip" and path.is_file()):
            raise ZooError(f"-i {self.trained_agent!r} must be an existing .zip file")
        wanted = (self.algo, self.env_name.gym_id)
        args_files = sorted(path.parent.glob("*/args.yml"))
        if args_files:
            recorded = read_run_yaml(args_files[0])
            found = (recorded.get("algo"), recorded.get("env"))
            if found != wanted:
                raise ZooError(
                    f"-i {self.trained_agent} comes from a run of --algo {found[0]} --env {found[1]} "
                    f"({args_files[0]}); "
                    f"this run is --algo {wanted[0]} --env {wanted[1]}"
                )
            return
        try:
            with zipfile.ZipFile(path) as archive, archive.open("data") as entry:
                raw = entry.read(MAX_DATA_BYTES + 1)
            if len(raw) > MAX_DATA_BYTES:
                raise ZooError(f"-i {self.trained_agent} is not a saved model: its data entry is too large")
            data = json.loads(raw)
            if "format" in data:  # our agents' plain files: "delayzoo.<Class>/<version>"
                saved_by = str(data["format"]).split("/")[0].removeprefix("delayzoo.")
                if saved_by != ALGOS[self.algo].__name__:
                    raise ZooError(f"-i {self.trained_agent} was saved by {saved_by}; this run is --algo {self.algo}")
                return
            module = data["policy_class"]["__module__"]
        except (zipfile.BadZipFile, KeyError, TypeError, ValueError, RecursionError) as error:
            raise ZooError(f"-i {self.trained_agent} is not a model saved by Stable-Baselines3 ({error})") from error
        ours = _policy_modules(ALGOS[self.algo])
        for name, algorithm in ALGOS.items():
            if module in _policy_modules(algorithm) and module not in ours:
                raise ZooError(
                    f"-i {self.trained_agent} holds a {name} policy ({module}); this run is --algo {self.algo}"
                )

    def create_log_folder(self) -> None:
        """Check everything still unchecked, then create the folders (remembering the first one created)."""
        self._check_resume()
        created = Path(self.params_path)
        while not created.parent.exists():
            created = created.parent
        self._created = None if created.exists() else created
        super().create_log_folder()

    def _remove_created(self) -> None:
        if self._created is not None and self._created.exists():
            shutil.rmtree(self._created)
            self._created = None

    # ------------------------------------------------------------------ envs
    def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = False) -> VecEnv:
        """``n_envs`` envs from :func:`make_zoo_env`, with rl_zoo3's normalisation, frame stack and transposition
        (Atari envs stack their own frames, see :func:`split_frame_stack`).

        Training envs write ``<run>/<rank>.monitor.csv`` (whole games for Atari: the monitor sits below
        the life-loss and delay wrappers), with rl_zoo3's ``monitor_kwargs``. Plain Gymnasium envs are
        made from the parent's ``EnvSpec``, so ``--vec-env subproc`` works for ids registered only here
        (``--gym-packages``, or registered by the calling script). With DelayedEZ's ``self_play_actors``, the
        training "env" is the picklable function its actors build their envs with. Atari evaluation envs
        (``--eval-freq``) report life losses as episode starts
        (:class:`~delayzoo.agents.common.evaluation.LifeLossEpisodeStarts`), so recurrent agents restart
        their state there, as in training; scores stay whole games.
        """
        log_dir = None if eval_env or no_log else self.save_path
        frame_stack, env_kwargs = split_frame_stack(
            self.env_name.gym_id, self.frame_stack, self.eval_env_kwargs if eval_env else self.env_kwargs
        )
        env_id = gym.spec(self.env_name.gym_id) if self.kind == "gym" else self.env_name.gym_id
        makers = [
            partial(
                make_ranked_env,
                env_id,
                self.delay,
                None if log_dir is None else os.path.join(log_dir, str(rank)),
                self.zoo.pixels,
                self.env_wrapper,
                dict(env_kwargs),
                None if self.seed is None else self.seed + rank,
                dict(self.monitor_kwargs),
            )
            for rank in range(n_envs)
        ]
        if self._self_play_actors and not eval_env:
            if frame_stack:
                raise ZooError("self_play_actors cannot be used with frame_stack on this env (VecFrameStack)")
            # the self-play actors build their envs from this picklable function (no monitor file: the
            # learner logs their episodes); the model keeps one env of it for the spaces
            return partial(  # type: ignore[return-value]
                make_ranked_env, env_id, self.delay, None, self.zoo.pixels, self.env_wrapper, dict(env_kwargs), None,
            )
        env: VecEnv = self.vec_env_class(makers, **self.vec_env_kwargs)  # type: ignore[arg-type]
        env.seed(self.seed)
        if self.vec_env_wrapper is not None:
            env = self.vec_env_wrapper(env)
        env = self._maybe_normalize(env, eval_env)
        env = stack_and_transpose(env, frame_stack, self.verbose)
        return LifeLossEpisodeStarts(env) if eval_env and self.kind == "atari" else env

    def _preprocess_action_noise(self, hyperparams: dict[str, Any], saved_hyperparams: dict[str, Any], env: Any) -> Any:
        """rl_zoo3's action noise; none for the actors' env function (DelayedEZ explores by its search)."""
        if not isinstance(env, VecEnv):
            return hyperparams
        return super()._preprocess_action_noise(hyperparams, saved_hyperparams, env)

    def _maybe_normalize(self, env: VecEnv, eval_env: bool) -> VecEnv:
        """rl_zoo3's normalisation, with the statistics of ``-i``'s model read from plain ``.npz`` arrays;
        under ``--pending-view`` only the ``"observation"`` key is normalised.

        A pickled ``vecnormalize.pkl`` there is refused unless ``--trust-run-files`` is given.
        """
        if self.trained_agent:
            _, statistics = checkpoint_files(self.trained_agent, self.env_name)
            pickled = statistics.with_suffix(".pkl")
            if statistics.is_file():
                print(f"Loading saved VecNormalize stats {statistics}")
                return load_normalization(statistics, env, training=not eval_env)
            if pickled.is_file():
                if not self.zoo.trust_run_files:
                    raise ZooError(
                        f"{pickled} is a pickle, and loading it could run code; pass --trust-run-files if you "
                        "trust this run folder"
                    )
                print(f"Loading saved VecNormalize stats {pickled} (--trust-run-files)")
                env = VecNormalize.load(str(pickled), env)
                if eval_env:
                    env.training, env.norm_reward = False, False
                return env
        if not self.normalize:
            return env
        kwargs = dict(self.normalize_kwargs)
        if self.delay.pending_view:
            # the pending actions and the delay are integers, which VecNormalize cannot take
            kwargs.setdefault("norm_obs_keys", ["observation"])
        if eval_env:
            kwargs.update(norm_reward=False, training=False)
        if self.verbose > 0:
            print(f"Normalization activated: {kwargs}" if kwargs else "Normalizing input and reward")
        return VecNormalize(env, **kwargs)

    def create_callbacks(self) -> None:
        """rl_zoo3's callbacks, with checkpoints written atomically (model last) and statistics as ``.npz``.

        Checkpoints hold the replay buffer with ``--save-replay-buffer`` and the normalisation statistics
        when observations or rewards are normalised, so ``-i rl_model_<steps>_steps.zip`` resumes from
        the last complete checkpoint after a crash or a SIGKILL. A new best model of the evaluation
        callback is written the same way (statistics, then ``best_model.zip``). rl_zoo3's
        ``ParallelTrainCallback`` is refused for algorithms other than SAC and TQC, which it cannot train.
        """
        parallel = any(isinstance(callback, ParallelTrainCallback) for callback in self.callbacks)
        if parallel and not issubclass(ALGOS[self.algo], (SAC, TQC)):
            raise ZooError(
                "callback rl_zoo3.callbacks.ParallelTrainCallback trains SAC and TQC only (it reloads the model as "
                f"one of them and trains that copy in a thread); --algo {self.algo} is not one of them: remove the "
                "callback"
            )
        super().create_callbacks()
        for index, callback in enumerate(self.callbacks):
            if type(callback) is CheckpointCallback:
                self.callbacks[index] = AtomicCheckpointCallback(
                    save_freq=callback.save_freq,
                    save_path=callback.save_path,
                    name_prefix=callback.name_prefix,
                    save_replay_buffer=self.save_replay_buffer,
                    save_vecnormalize=bool(self.normalize),
                    verbose=callback.verbose,
                )
            elif isinstance(callback, EvalCallback):
                on_new_best: list[BaseCallback] = []
                if isinstance(callback.callback_on_new_best, SaveVecNormalizeCallback):
                    on_new_best.append(SaveNormalizationCallback(self.params_path))
                elif callback.callback_on_new_best is not None:
                    on_new_best.append(callback.callback_on_new_best)
                if callback.best_model_save_path is not None:
                    on_new_best.append(SaveBestModelCallback(callback.best_model_save_path))
                    callback.best_model_save_path = None  # SB3 would write best_model.zip in place
                if on_new_best:
                    callback.callback_on_new_best = CallbackList(on_new_best)
                    callback.callback_on_new_best.parent = callback

    # ------------------------------------------------------------------ training
    def _load_pretrained_agent(self, hyperparams: dict[str, Any], env: VecEnv) -> BaseAlgorithm:
        print(f"Loading pretrained agent {self.trained_agent}")
        algorithm = ALGOS[self.algo]
        ours = issubclass(algorithm, PlainSaveMixin)
        kwargs = {key: value for key, value in hyperparams.items() if key not in ("policy", "policy_kwargs")}
        kwargs.update(seed=self.seed, tensorboard_log=self.tensorboard_log, verbose=self.verbose)
        if ours or self.zoo.trust_run_files:
            model = algorithm.load(self.trained_agent, env=env, device=self.device, **kwargs)
        else:
            model = load_sb3_model(
                algorithm, self.trained_agent, env, hyperparams["policy"], hyperparams.get("policy_kwargs"),
                self.device, **kwargs,
            )
        self.args.resume_timesteps = int(model.num_timesteps)
        if self._scale_final_updates(kwargs, int(model.num_timesteps) + self.n_timesteps):
            model.final_updates = kwargs["final_updates"]  # type: ignore[attr-defined]
        replay_buffer, _ = checkpoint_files(self.trained_agent, self.env_name)
        if hasattr(model, "load_replay_buffer"):
            load_buffer(model, replay_buffer, self.zoo.trust_run_files, self.truncate_last_trajectory)
        return model

    def learn(self, model: BaseAlgorithm) -> None:
        """Train for ``-n`` steps (more steps on top of a resumed model's counter).

        Ctrl-C or SIGTERM stops and keeps the model.
        """
        kwargs: dict[str, Any] = {"reset_num_timesteps": not self.continue_training}
        if self.log_interval > -1:
            kwargs["log_interval"] = self.log_interval
        elif self.log_interval < -1:
            kwargs["log_interval"] = None
        if self.callbacks:
            kwargs["callback"] = self.callbacks
        if self.algo == "ars" and self.n_envs > 1:
            kwargs["async_eval"] = AsyncEval(
                [partial(self.create_envs, n_envs=1, no_log=True) for _ in range(self.n_envs)], model.policy
            )
        self._terminate.install()
        try:
            with warnings.catch_warnings():
                # Atari eval envs are wrapped in LifeLossEpisodeStarts on purpose (see create_envs).
                warnings.filterwarnings("ignore", message="Training and eval env are not of the same type")
                model.learn(self.n_timesteps, **kwargs)
        except KeyboardInterrupt:
            self.interrupted = True
            signal = "SIGTERM" if self._terminate.received else "Ctrl-C"
            print(f"Interrupted ({signal}) at {model.num_timesteps} steps: saving the model and the replay buffer")
            for callback in self.callbacks:
                if hasattr(callback, "model"):  # started (a progress bar to close)
                    callback.on_training_end()
        finally:
            self._terminate.disarm()
            if model.env is not None:
                model.env.close()

    def save_trained_model(self, model: BaseAlgorithm) -> None:
        """Save the model, its replay buffer (with ``--save-replay-buffer``, and always after Ctrl-C or
        SIGTERM, so that ``-i`` resumes where training stopped) and its normalisation statistics (as
        ``<env>/vecnormalize.npz``); each atomically, the model last.
        """
        try:
            print(f"Saving to {self.save_path}")
            if (
                hasattr(model, "save_replay_buffer")
                and getattr(model, "replay_buffer", None) is not None
                and (self.save_replay_buffer or self.interrupted)
            ):
                print("Saving replay buffer")
                path = os.path.join(self.save_path, f"replay_buffer.{buffer_suffix(model)}")
                atomic_write(path, partial(save_buffer, model))
            statistics = model.get_vec_normalize_env()
            if self.normalize and statistics is not None:
                save_normalization(statistics, os.path.join(self.params_path, "vecnormalize.npz"))
            atomic_write(os.path.join(self.save_path, f"{self.env_name}.zip"), model.save)
        finally:
            self._terminate.restore()
