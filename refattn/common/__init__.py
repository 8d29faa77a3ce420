"""What every family shares, one module per concern; this package re-exports their public names.

- :mod:`~refattn.common.checks` and :mod:`~refattn.common.ints`: input checks (arrays, sizes, choices,
  ``causal``, ``scale``, ``rng``), so that bad input gets a ``TypeError``/``ValueError`` naming the argument
  and the shapes seen.
- :mod:`~refattn.common.groups`: grouped-query attention's head grouping.
- :mod:`~refattn.common.products`: masked products (weighted values of masked rows, the split of a scale).
- :mod:`~refattn.common.budget`: the memory budget (``REFATTN_MEMORY_BUDGET``, :func:`set_memory_budget`).
- :mod:`~refattn.common.npz`: byte-stable ``.npz`` writing.
- :mod:`~refattn.common.init`: Glorot initialisation.

Library modules import from the concern's module; ``refattn.common.<name>`` is the public spelling.
"""
from .budget import (
    DEFAULT_MEMORY_BUDGET,
    MEMORY_BUDGET_ENV,
    MemoryBudgetError,
    check_fits,
    memory_budget,
    set_memory_budget,
    temporary_memory_budget,
)
from .checks import (
    ALIGNMENTS,
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_non_negative,
    check_qkv,
    check_scale,
    check_size,
    check_sizes,
    check_window,
    checked_qkv,
    compute_dtype,
    default_scale,
)
from .groups import grouped_kv, kv_groups, repeat_over_groups, sum_over_groups
from .init import glorot
from .ints import MAX_SIZE, check_non_negative_int, check_positive_int
from .npz import write_npz
from .products import scores, split_scale, weighted_values

__all__ = [
    "ALIGNMENTS",
    "DEFAULT_MEMORY_BUDGET",
    "MAX_SIZE",
    "MEMORY_BUDGET_ENV",
    "MemoryBudgetError",
    "as_float",
    "as_rng",
    "broadcast_batch",
    "causal_alignment",
    "check_bool",
    "check_choice",
    "check_fits",
    "check_non_negative",
    "check_non_negative_int",
    "check_positive_int",
    "check_qkv",
    "check_scale",
    "check_size",
    "check_sizes",
    "check_window",
    "checked_qkv",
    "compute_dtype",
    "default_scale",
    "glorot",
    "grouped_kv",
    "kv_groups",
    "memory_budget",
    "repeat_over_groups",
    "scores",
    "set_memory_budget",
    "split_scale",
    "sum_over_groups",
    "temporary_memory_budget",
    "weighted_values",
    "write_npz",
]
