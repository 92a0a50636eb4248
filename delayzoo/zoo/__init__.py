"""The zoo: train, evaluate and plot every agent on every env from per-env YAML files, on top of rl_zoo3.

Command lines: ``python -m delayzoo.zoo.train`` (rl_zoo3's flags plus execution-delay flags),
``python -m delayzoo.zoo.eval`` (every checkpoint of a run into a CSV), ``python -m delayzoo.zoo.plot``
(learning curves, return against delay and the Atari 100k table), ``python -m delayzoo.zoo.enjoy`` and
``python -m delayzoo.zoo.record_video`` (watch or record a trained agent under its run's delay),
``python -m delayzoo.zoo.sweep`` (grids of runs on Ray), ``python -m delayzoo.zoo.study`` (the delay benchmark),
``python -m delayzoo.zoo.random_play``, or ``delayzoo COMMAND`` (:data:`delayzoo.zoo.cli.COMMANDS`).

The layers, from the bottom: the delay settings (:mod:`~delayzoo.zoo.delay_settings`, torch-free), the envs
(:mod:`~delayzoo.zoo.envs`, :mod:`~delayzoo.zoo.vec_envs`), hyperparameters and run files
(:mod:`~delayzoo.zoo.hyperparams`, :mod:`~delayzoo.zoo.runs`, :mod:`~delayzoo.zoo.trust`, ...), training
(:mod:`~delayzoo.zoo.exp_manager`), then the commands, each ending through :func:`~delayzoo.zoo.errors.run_command`.
"""
