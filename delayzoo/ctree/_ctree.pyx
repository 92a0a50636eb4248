# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled batched MCTS tree: the C++ core of :mod:`delayzoo.ctree`.

Same API and semantics as :mod:`delayzoo.ctree.ptree`, which documents them.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t

import numpy as np

cimport numpy as cnp

cnp.import_array()

cdef extern from "tree.hpp" namespace "delayzoo::ctree" nogil:
    cdef cppclass CRoots "delayzoo::ctree::Roots":
        CRoots(int num_roots, int num_actions, int max_nodes, uint64_t seed) except +
        void prepare(const double* value_prefix, const double* logits, const double* noise,
                     double noise_fraction, const uint8_t* legal, const double* values,
                     const double* gumbel, int num_considered) except +
        void distributions(int64_t* out)
        void values(double* out)
        int num_roots()
        int num_actions()
        int max_nodes()
        int num_nodes()

    cdef cppclass CMinMaxStatsList "delayzoo::ctree::MinMaxStatsList":
        CMinMaxStatsList(int num_roots, double value_delta_max, bint per_node) except +
        void reset()
        double minimum(int b)
        double maximum(int b)
        int num_roots_
        double value_delta_max_
        bint per_node_

    cdef cppclass CSearchResults "delayzoo::ctree::SearchResults":
        CSearchResults(int num_roots) except +
        int num_roots_
        int* path_len_data "path_len_.data"()

    void c_batch_traverse "delayzoo::ctree::batch_traverse"(
        CRoots& roots, double c_init, double c_base, double discount,
        CMinMaxStatsList& minmax, CSearchResults& results, int64_t* parent_index,
        int64_t* batch_index, int64_t* last_action) except +

    void c_batch_traverse_gumbel "delayzoo::ctree::batch_traverse_gumbel"(
        CRoots& roots, double c_visit, double c_scale, double discount,
        CMinMaxStatsList& minmax, CSearchResults& results, int64_t* parent_index,
        int64_t* batch_index, int64_t* last_action) except +

    void c_gumbel_outputs "delayzoo::ctree::gumbel_outputs"(
        CRoots& roots, double c_visit, double c_scale, double discount,
        CMinMaxStatsList& minmax, int64_t* actions, double* policy) except +

    void c_halving_schedule "delayzoo::ctree::halving_schedule"(
        int num_considered, int num_simulations, int* out) except +

    void c_batch_backpropagate "delayzoo::ctree::batch_backpropagate"(
        CRoots& roots, int64_t new_index, double discount, const double* value_prefix,
        const double* value, const double* logits, CMinMaxStatsList& minmax,
        CSearchResults& results, const uint8_t* is_reset) except +


cdef bint _ready(object x, int typenum, int ndim, Py_ssize_t rows, Py_ssize_t cols):
    """Whether x can be handed to C as it is: an aligned native C-contiguous array of the shape.

    The common case, checked without the numpy calls and temporaries of the general path.
    """
    if not cnp.PyArray_Check(x):
        return False
    cdef cnp.ndarray arr = <cnp.ndarray>x
    if (cnp.PyArray_TYPE(arr) != typenum or cnp.PyArray_NDIM(arr) != ndim
            or not cnp.PyArray_ISCARRAY_RO(arr) or not cnp.PyArray_ISNOTSWAPPED(arr)):
        return False
    if cnp.PyArray_DIM(arr, 0) != rows:
        return False
    return ndim == 1 or cnp.PyArray_DIM(arr, 1) == cols


cdef cnp.ndarray _vector(object x, Py_ssize_t n, str name):
    if _ready(x, cnp.NPY_DOUBLE, 1, n, 0):
        return <cnp.ndarray>x
    arr = np.ascontiguousarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return arr


cdef cnp.ndarray _matrix(object x, Py_ssize_t rows, Py_ssize_t cols, str name):
    if _ready(x, cnp.NPY_DOUBLE, 2, rows, cols):
        return <cnp.ndarray>x
    arr = np.ascontiguousarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != rows or arr.shape[1] != cols:
        raise ValueError(f"{name} must have shape ({rows}, {cols}), got {arr.shape}")
    return arr


cdef cnp.ndarray _flags(object x, tuple shape, str name):
    if _ready(x, cnp.NPY_BOOL, len(shape), shape[0], shape[1] if len(shape) > 1 else 0):
        return <cnp.ndarray>x  # numpy bools are bytes 0 / 1
    arr = np.asarray(x)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if arr.dtype != np.bool_:
        arr = arr != 0
    return np.ascontiguousarray(arr).view(np.uint8)


cdef inline const double* _doubles(cnp.ndarray arr):
    return <const double*>cnp.PyArray_DATA(arr)


cdef inline const uint8_t* _bytes(cnp.ndarray arr):
    return <const uint8_t*>cnp.PyArray_DATA(arr)


cdef cnp.ndarray _empty(Py_ssize_t n, int typenum):
    cdef cnp.npy_intp dim = n
    return cnp.PyArray_EMPTY(1, &dim, typenum, 0)


cdef int _count(object x, str name, int minimum) except -1:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {x!r}")
    if x < minimum or x > 2**31 - 1:
        raise ValueError(f"{name} must be an int in [{minimum}, 2**31 - 1], got {x}")
    return int(x)


Q_NORMALIZATIONS = ("tree", "parent_siblings")


cdef bint _per_node(object q_normalization) except -1:
    if q_normalization not in Q_NORMALIZATIONS:
        raise ValueError(f"q_normalization must be one of {Q_NORMALIZATIONS}, got {q_normalization!r}")
    return q_normalization == Q_NORMALIZATIONS[1]


def halving_schedule(num_considered, num_simulations):
    """The visit count an action must have to be chosen at each root simulation of sequential halving.

    Sequential halving over ``num_considered`` actions (Gumbel MuZero): every considered action is
    visited equally, then the better half of them, and so on, spending exactly ``num_simulations``.

    :return: int64 ``(num_simulations,)``
    """
    cdef int m = _count(num_considered, "num_considered", 1)
    cdef int n = _count(num_simulations, "num_simulations", 0)
    cdef cnp.ndarray out = np.zeros(n, dtype=np.intc)
    if n:
        c_halving_schedule(m, n, <int*>cnp.PyArray_DATA(out))
    return out.astype(np.int64)


cdef class Roots:
    """B search trees with A actions, each a preallocated pool of ``max_nodes`` nodes.

    :param num_roots: number of roots B searched together
    :param num_actions: number of actions A
    :param max_nodes: nodes per root, at least ``num_simulations + 1``
    :param seed: seed of the generator that breaks pUCT ties
    """

    cdef CRoots* c

    def __cinit__(self, num_roots, num_actions, max_nodes, seed=0):
        cdef int b = _count(num_roots, "num_roots", 1)
        cdef int a = _count(num_actions, "num_actions", 1)
        cdef int m = _count(max_nodes, "max_nodes", 1)
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        if seed < 0 or seed >= 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self.c = new CRoots(b, a, m, <uint64_t>int(seed))

    def __dealloc__(self):
        del self.c

    @property
    def num_roots(self) -> int:
        return self.c.num_roots()

    @property
    def num_actions(self) -> int:
        return self.c.num_actions()

    @property
    def max_nodes(self) -> int:
        return self.c.max_nodes()

    @property
    def num_nodes(self) -> int:
        """Expanded nodes per root in the current search (0 before :meth:`prepare`)."""
        return self.c.num_nodes()

    def prepare(self, value_prefix, policy_logits, noise=None, noise_fraction=0.25, legal_mask=None,
                values=None, gumbel=None, num_considered=16):
        """Start a new search: expand every root.

        :param value_prefix: (B,) value prefix of the roots (usually 0)
        :param policy_logits: (B, A) policy logits of the roots
        :param noise: (B, A) exploration noise (e.g. Dirichlet samples) or None
        :param noise_fraction: weight f of the noise: prior = (1 - f) * prior + f * noise
        :param legal_mask: (B, A) bool legal actions of the roots, or None for all legal
        :param values: (B,) the network's values of the roots (the Gumbel search's mixed value and the
            per-node normalisation), or None for zeros
        :param gumbel: (B, A) Gumbel noise (scaled; zeros for none): the roots are then searched by
            :func:`batch_traverse_gumbel`; None: by :func:`batch_traverse` (pUCT)
        :param num_considered: actions sampled without replacement at each Gumbel root (capped by its
            legal actions)
        """
        cdef int B = self.c.num_roots(), A = self.c.num_actions()
        cdef cnp.ndarray vp = _vector(value_prefix, B, "value_prefix")
        cdef cnp.ndarray logits = _matrix(policy_logits, B, A, "policy_logits")
        cdef cnp.ndarray eta, legal, raw, gum
        cdef const double* eta_ptr = NULL
        cdef const uint8_t* legal_ptr = NULL
        cdef const double* raw_ptr = NULL
        cdef const double* gum_ptr = NULL
        cdef double f = float(noise_fraction)
        cdef int m = _count(num_considered, "num_considered", 1)
        if noise is not None:
            eta = _matrix(noise, B, A, "noise")
            eta_ptr = _doubles(eta)
        if legal_mask is not None:
            legal = _flags(legal_mask, (B, A), "legal_mask")
            legal_ptr = _bytes(legal)
        if values is not None:
            raw = _vector(values, B, "values")
            raw_ptr = _doubles(raw)
        if gumbel is not None:
            gum = _matrix(gumbel, B, A, "gumbel")
            gum_ptr = _doubles(gum)
        cdef const double* vp_ptr = _doubles(vp)
        cdef const double* logits_ptr = _doubles(logits)
        with nogil:
            self.c.prepare(vp_ptr, logits_ptr, eta_ptr, f, legal_ptr, raw_ptr, gum_ptr, m)

    def distributions(self) -> np.ndarray:
        """Visit counts of the root children, int64 (B, A)."""
        out = np.empty((self.c.num_roots(), self.c.num_actions()), dtype=np.int64)
        cdef int64_t[:, ::1] view = out
        self.c.distributions(&view[0, 0])
        return out

    def values(self) -> np.ndarray:
        """Root values (mean of the values backed up into each root), float64 (B,)."""
        out = np.empty(self.c.num_roots(), dtype=np.float64)
        cdef double[::1] view = out
        self.c.values(&view[0])
        return out


cdef class MinMaxStatsList:
    """Per-root min-max of the Q values in the tree, used to normalise Q in pUCT.

    The statistics always describe the search they are used with: handed a new search (after
    ``Roots.prepare``) or another ``Roots``, they are rebuilt from that tree, so one object can
    serve many searches.

    :param num_roots: number of roots B
    :param value_delta_max: floor of the max - min range used for normalisation
    :param q_normalization: ``"tree"``: by the min-max of the Q values of the whole tree;
        ``"parent_siblings"``: each node by the min-max of its visited children's Q and its own value
        (no statistics are kept)
    """

    cdef CMinMaxStatsList* c

    def __cinit__(self, num_roots, value_delta_max=0.01, q_normalization="tree"):
        cdef int b = _count(num_roots, "num_roots", 1)
        self.c = new CMinMaxStatsList(b, float(value_delta_max), _per_node(q_normalization))

    def __dealloc__(self):
        del self.c

    @property
    def num_roots(self) -> int:
        return self.c.num_roots_

    @property
    def value_delta_max(self) -> float:
        return self.c.value_delta_max_

    @property
    def q_normalization(self) -> str:
        return Q_NORMALIZATIONS[1] if self.c.per_node_ else Q_NORMALIZATIONS[0]

    def reset(self) -> None:
        """Forget the statistics; the next call rebuilds them from the tree it is given."""
        self.c.reset()

    def bounds(self):
        """(minimum, maximum) of the Q values in the tree, float64 (B,) each; (inf, -inf) if none."""
        lo = np.empty(self.c.num_roots_, dtype=np.float64)
        hi = np.empty(self.c.num_roots_, dtype=np.float64)
        cdef int b
        for b in range(self.c.num_roots_):
            lo[b] = self.c.minimum(b)
            hi[b] = self.c.maximum(b)
        return lo, hi


cdef class SearchResults:
    """Scratch space holding the search paths of the last :func:`batch_traverse`.

    :param num_roots: number of roots B
    """

    cdef CSearchResults* c
    cdef Roots roots

    def __cinit__(self, num_roots):
        cdef int b = _count(num_roots, "num_roots", 1)
        self.c = new CSearchResults(b)
        self.roots = None

    def __dealloc__(self):
        del self.c

    @property
    def num_roots(self) -> int:
        return self.c.num_roots_

    def search_lengths(self) -> np.ndarray:
        """Depth of each new leaf (edges from its root) in the last traversal, int64 (B,)."""
        cdef cnp.ndarray out = _empty(self.c.num_roots_, cnp.NPY_INT64)
        cdef int64_t* view = <int64_t*>cnp.PyArray_DATA(out)
        cdef int* lens = self.c.path_len_data()
        cdef bint traversed = self.roots is not None
        cdef int b
        for b in range(self.c.num_roots_):
            view[b] = lens[b] if traversed else 0
        return out


cdef tuple _descend(Roots roots, bint gumbel, double c1, double c2, double discount,
                    MinMaxStatsList minmax, SearchResults results):
    """Both traversals: (c1, c2) are (c_init, c_base) for pUCT, (c_visit, c_scale) for Gumbel."""
    cdef int B = roots.c.num_roots()
    cdef cnp.ndarray parent = _empty(B, cnp.NPY_INT64)
    cdef cnp.ndarray batch = _empty(B, cnp.NPY_INT64)
    cdef cnp.ndarray action = _empty(B, cnp.NPY_INT64)
    cdef int64_t* parent_ptr = <int64_t*>cnp.PyArray_DATA(parent)
    cdef int64_t* batch_ptr = <int64_t*>cnp.PyArray_DATA(batch)
    cdef int64_t* action_ptr = <int64_t*>cnp.PyArray_DATA(action)
    with nogil:
        if gumbel:
            c_batch_traverse_gumbel(roots.c[0], c1, c2, discount, minmax.c[0], results.c[0],
                                    parent_ptr, batch_ptr, action_ptr)
        else:
            c_batch_traverse(roots.c[0], c1, c2, discount, minmax.c[0], results.c[0],
                             parent_ptr, batch_ptr, action_ptr)
    results.roots = roots
    return parent, batch, action


def batch_traverse(Roots roots not None, double c_init, double c_base, double discount,
                   MinMaxStatsList minmax not None, SearchResults results not None):
    """Descend every tree by pUCT to an unexpanded child.

    :param roots: the trees
    :param c_init: pUCT constant c1 (1.25 in EfficientZero)
    :param c_base: pUCT constant c2 (19652 in EfficientZero)
    :param discount: discount per tree edge
    :param minmax: min-max statistics of this search
    :param results: scratch space that receives the search paths
    :return: (parent_index, batch_index, last_action), int64 (B,) each: the simulation index of
        the parent's latent, the root index, and the action to apply to the parent's latent
    """
    return _descend(roots, False, c_init, c_base, discount, minmax, results)


def batch_traverse_gumbel(Roots roots not None, double c_visit, double c_scale, double discount,
                          MinMaxStatsList minmax not None, SearchResults results not None):
    """Descend every tree by Gumbel MuZero's rules to an unexpanded child.

    :param roots: the trees, prepared with ``gumbel`` noise
    :param c_visit: sigma's visit offset (50 in Gumbel MuZero)
    :param c_scale: sigma's scale (0.1 in Gumbel MuZero)
    :param discount: discount per tree edge
    :param minmax: min-max statistics of this search
    :param results: scratch space that receives the search paths
    :return: (parent_index, batch_index, last_action), as :func:`batch_traverse`
    """
    return _descend(roots, True, c_visit, c_scale, discount, minmax, results)


def gumbel_outputs(Roots roots not None, double c_visit, double c_scale, double discount,
                   MinMaxStatsList minmax not None):
    """The Gumbel search's selected actions and improved policies.

    :return: (actions int64 (B,), improved policies float64 (B, A))
    """
    cdef int B = roots.c.num_roots(), A = roots.c.num_actions()
    actions = np.empty(B, dtype=np.int64)
    policy = np.empty((B, A), dtype=np.float64)
    cdef int64_t[::1] actions_view = actions
    cdef double[:, ::1] policy_view = policy
    with nogil:
        c_gumbel_outputs(roots.c[0], c_visit, c_scale, discount, minmax.c[0], &actions_view[0],
                         &policy_view[0, 0])
    return actions, policy


def batch_backpropagate(new_index, double discount, value_prefix, value, policy_logits,
                        MinMaxStatsList minmax not None, SearchResults results not None,
                        is_reset=None):
    """Expand the leaves of the last traversal and back their values up to the roots.

    :param new_index: simulation index under which the caller stored the leaves' latents (>= 1)
    :param discount: discount per tree edge
    :param value_prefix: (B,) value prefixes predicted for the leaves
    :param value: (B,) values predicted for the leaves
    :param policy_logits: (B, A) policy logits predicted for the leaves
    :param minmax: min-max statistics of this search
    :param results: the results of the last :func:`batch_traverse`
    :param is_reset: (B,) bool, whether the value prefix restarts after each leaf (None: never)
    """
    cdef Roots roots = results.roots
    if roots is None:
        raise ValueError("results hold no batch_traverse; call batch_traverse first")
    # an exact int (not a bool) skips the slower isinstance checks
    if type(new_index) is not int and (
            isinstance(new_index, (bool, np.bool_)) or not isinstance(new_index, (int, np.integer))):
        raise TypeError(f"new_index must be an int, got {new_index!r}")
    if new_index < 1 or new_index >= 2**62:
        raise ValueError(f"new_index must be >= 1 (index 0 holds the root latents), got {new_index}")
    cdef int B = roots.c.num_roots(), A = roots.c.num_actions()
    cdef cnp.ndarray vp = _vector(value_prefix, B, "value_prefix")
    cdef cnp.ndarray v = _vector(value, B, "value")
    cdef cnp.ndarray logits = _matrix(policy_logits, B, A, "policy_logits")
    cdef cnp.ndarray reset
    cdef const uint8_t* reset_ptr = NULL
    cdef int64_t index = new_index
    if is_reset is not None:
        reset = _flags(is_reset, (B,), "is_reset")
        reset_ptr = _bytes(reset)
    cdef const double* vp_ptr = _doubles(vp)
    cdef const double* v_ptr = _doubles(v)
    cdef const double* logits_ptr = _doubles(logits)
    with nogil:
        c_batch_backpropagate(roots.c[0], index, discount, vp_ptr, v_ptr, logits_ptr,
                              minmax.c[0], results.c[0], reset_ptr)
