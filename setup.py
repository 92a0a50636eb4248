"""Build of the compiled MCTS tree; all other metadata lives in setup.cfg and pyproject.toml."""

import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

if sys.platform == "win32":
    compile_args = ["/O2", "/std:c++17"]
else:
    # -ffp-contract=off keeps a*b+c unfused, so the tree does the same arithmetic as ptree;
    # -fno-math-errno only lets sqrt be inlined (no value changes).
    compile_args = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-math-errno"]

extensions = [
    Extension(
        "delayzoo.ctree._ctree",
        sources=["delayzoo/ctree/_ctree.pyx", "delayzoo/ctree/tree.cpp"],
        include_dirs=[np.get_include(), "delayzoo/ctree"],
        depends=["delayzoo/ctree/tree.hpp"],
        language="c++",
        extra_compile_args=compile_args,
    )
]

setup(
    ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}),
    # the sources travel in the sdist (MANIFEST.in); wheels only need the compiled module
    exclude_package_data={"delayzoo.ctree": ["*.pyx", "*.cpp", "*.hpp"]},
)
