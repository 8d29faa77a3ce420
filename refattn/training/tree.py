"""Pytrees of parameters: frozen dataclasses and tuples of arrays, walked leaf by leaf.

A tree's leaves are its arrays, depth first in field order; ``None``, ints and strings are static values
(kept, not leaves). The models of :mod:`refattn.training.model`, Adam and the weight files use these.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["flatten", "leaf_names", "tree_map", "unflatten"]


def _children(tree) -> list[tuple[str, Any]] | None:
    """(name, child) pairs of a dataclass or tuple; ``None`` for a leaf or a static value."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [(f.name, getattr(tree, f.name)) for f in dataclasses.fields(tree)]
    if isinstance(tree, (tuple, list)):
        return [(str(i), child) for i, child in enumerate(tree)]
    return None


def _rebuild(tree, children: list) -> Any:
    if isinstance(tree, (tuple, list)):
        return type(tree)(children)
    return type(tree)(*children)


def leaf_names(tree) -> list[str]:
    """Dotted paths of the arrays of a parameter tree, in :func:`flatten`'s order.

    Parameters
    ----------
    tree : dataclass, tuple or ndarray
        Frozen dataclasses and tuples of arrays; ``None``, ints and strings are static (not leaves).

    Returns
    -------
    list of str
        E.g. ``"transformer.encoder.0.self_attn.w_q"``.

    Examples
    --------
    >>> from refattn import LayerNormParams
    >>> leaf_names((LayerNormParams(np.ones(2), np.zeros(2)), None))
    ['0.gamma', '0.beta']
    """
    if isinstance(tree, np.ndarray):
        return [""]
    children = _children(tree)
    if children is None:
        return []
    return [f"{name}.{sub}" if sub else name for name, child in children for sub in leaf_names(child)]


def flatten(tree) -> list[NDArray]:
    """The arrays of a parameter tree, depth first in field order.

    Parameters
    ----------
    tree : dataclass, tuple or ndarray
        As in :func:`leaf_names`.

    Returns
    -------
    list of ndarray
        The tree's own arrays (not copies).
    """
    if isinstance(tree, np.ndarray):
        return [tree]
    children = _children(tree)
    return [] if children is None else [leaf for _, child in children for leaf in flatten(child)]


def unflatten(tree, leaves: list[NDArray]) -> Any:
    """A tree of ``tree``'s structure (and static values) holding ``leaves`` in :func:`flatten`'s order.

    Parameters
    ----------
    tree : dataclass, tuple or ndarray
        The structure.
    leaves : list of ndarray
        One array per leaf of ``tree``, each of its leaf's shape.

    Returns
    -------
    The new tree.

    Examples
    --------
    >>> from refattn import LayerNormParams
    >>> unflatten(LayerNormParams(np.ones(2), np.zeros(2)), [np.zeros(2), np.ones(2)]).beta
    array([1., 1.])
    """
    like = flatten(tree)
    if len(leaves) != len(like):
        raise ValueError(f"leaves has {len(leaves)} arrays but the tree has {len(like)}")
    for name, old, new in zip(leaf_names(tree), like, leaves, strict=True):
        if np.shape(new) != old.shape:
            raise ValueError(f"leaf {name!r} has shape {np.shape(new)} but the tree's has shape {old.shape}")
    it = iter(leaves)

    def build(node):
        if isinstance(node, np.ndarray):
            return next(it)
        children = _children(node)
        return node if children is None else _rebuild(node, [build(child) for _, child in children])

    return build(tree)


def tree_map(fn: Callable[..., NDArray], tree, *rest) -> Any:
    """Apply ``fn`` leaf by leaf to one tree, or to several trees of the same structure.

    Parameters
    ----------
    fn : callable
        ``fn(leaf, *other_leaves) -> array`` of the leaf's shape.
    tree : dataclass, tuple or ndarray
        Gives the structure and static values of the result.
    *rest : trees
        Of ``tree``'s structure.

    Returns
    -------
    The new tree.

    Examples
    --------
    >>> from refattn import LayerNormParams
    >>> p = LayerNormParams(np.ones(2), np.zeros(2))
    >>> tree_map(lambda a, b: a + 2 * b, p, p).gamma
    array([3., 3.])
    """
    others = [flatten(t) for t in rest]
    return unflatten(tree, [fn(*leaves) for leaves in zip(flatten(tree), *others, strict=True)])
