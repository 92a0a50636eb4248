"""Sphinx configuration of delayzoo's documentation (``bash scripts/docs.sh`` builds it into docs/_build/html).

Markdown pages (MyST) beside an API reference generated from the docstrings. The build is offline: no
intersphinx inventory is fetched, so references to other projects' names are left as plain text, while
every reference to a ``delayzoo`` name must resolve (nitpicky mode, warnings are errors).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from delayzoo.version import __version__  # noqa: E402

project = "delayzoo"
author = "the delayzoo developers"
copyright = "2026, the delayzoo developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# results/ holds the delay benchmark's run files (CSV, YAML), not pages
exclude_patterns = ["_build", "results"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
suppress_warnings: list[str] = []

autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_class_signature = "separated"
autodoc_inherit_docstrings = False
autosummary_generate = False

# Offline: names of other projects cannot be linked without their inventories, so nitpicky mode skips
# them; a broken reference to a delayzoo name is still an error.
nitpicky = True
_EXTERNAL = (
    "ale_py", "argparse", "collections", "gym", "gymnasium", "np", "numpy", "nn", "th", "torch", "typing",
    "stable_baselines3", "sb3_contrib", "rl_zoo3", "pathlib", "Path", "pandas", "optuna", "ray", "yaml",
    "dm_control", "shimmy", "enum", "abc", "types", "builtins", "threading", "multiprocessing", "signal",
    "dataclasses", "io", "os", "random", "re", "matplotlib", "concurrent", "contextlib",
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({'|'.join(_EXTERNAL)})(\..*)?"),
    (r"py:(class|obj|data)", r"(int|float|str|bool|bytes|None|NoneType|dict|list|tuple|set|object|type|Any|"
     r"Callable|Sequence|Mapping|Iterator|Iterable|Generator|Literal|Optional|Union|ClassVar|Self|"
     r"TypeVar|NamedTuple|Exception|ValueError|TypeError|RuntimeError|BaseException|ellipsis|"
     r"Tensor|Module|Space|Env|VecEnv|GymEnv|Schedule|BasePolicy|ActType|ObsType|WrapperObsType|"
     r"WrapperActType|RenderFrame|MaybeCallback|TrainFreq|ReplayBufferSamples|BaseCallback|"
     r"ndarray|NDArray|Generator|RunningMeanStd|VecNormalize|EnvSpec|DictReplayBuffer|BaseBuffer|"
     r"OffPolicyAlgorithm|BaseAlgorithm|Logger|Figure|Axes|Namespace|ArgumentParser)"),
]

# The docstrings' "::" blocks are mostly command lines and file layouts: shown as plain text, not as Python
highlight_language = "text"

html_theme = "furo"
html_title = f"delayzoo {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

# Private names that docstrings mention on purpose (implementation notes), never documented.
nitpick_ignore_regex += [
    (r"py:(meth|attr|data|func|class|mod)", r"(.*\.)?_[A-Za-z][\w.]*"),
    (r"py:class", r"(.*\.)?Self\w+"),  # the SB3 TypeVars of learn's return
    (r"py:class", r"delayzoo\.agents\.common\.pending\.Carry"),  # a TypeVar
]


def _canonical(name: str, module: str | None, klass: str | None = None) -> str | None:
    """The documented (defining) path of ``name``, as a docstring in ``module`` may write it.

    Docstrings name public objects where users import them (``delayzoo.wrappers.ExecutionDelay``) or
    unqualified (``ZooError`` inside :mod:`delayzoo.zoo.eval`); the reference documents them in the
    module that defines them (``delayzoo.wrappers.delay.ExecutionDelay``).
    """
    import importlib

    if name.startswith("delayzoo."):
        candidates = [name]
    else:
        candidates = [f"{module}.{klass}.{name}"] if module and klass else []
        candidates += [f"{module}.{name}"] if module else []
    for candidate in candidates:
        parts = candidate.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for part in parts[split:]:
                    obj = getattr(obj, part)
            except AttributeError:
                break
            owner, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if owner and qualname and f"{owner}.{qualname}" != name:
                return f"{owner}.{qualname}"
            break
    return None


def _resolve_alias(app, env, node, contnode):
    """Resolve a delayzoo reference by the object's defining module (see :func:`_canonical`)."""
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = _canonical(node["reftarget"], node.get("py:module"), node.get("py:class"))
    if target is None and "." not in node["reftarget"]:
        # some docstrings (dataclasses' fields) reach here without their module: a unique delayzoo name will do
        found = [name for name in domain.objects if name.endswith(f".{node['reftarget']}")]
        target = found[0] if len(found) == 1 else None
    if target is None or not target.startswith("delayzoo."):
        return None
    node = node.deepcopy()
    node["reftarget"] = target
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], target, node, contnode)


def setup(app):
    app.connect("missing-reference", _resolve_alias)
