r"""Star-Transformer: a ring of satellite tokens around one relay node (survey §4.1.1, Fig. 5a).

n satellites (positions 0 … n − 1, one per token) and one relay (position n), an (n + 1) × (n + 1)
pattern:

    J_i = { i − 1, i, i + 1 (mod n), n }      satellite i: its ring neighbours, itself, the relay
    J_n = { 0, 1, …, n }                      the relay: every satellite and itself

Every two non-adjacent satellites are two hops apart through the relay, at O(n) edges. As a union
of atomic patterns (the ring's wrap-around pair added explicitly):

    star = band(1) | global({n}) | {(0, n − 1), (n − 1, 0)}
"""
from __future__ import annotations

from ..common.checks import check_bool, check_sizes
from ..mechanism import Mechanism
from .attention import pattern_apply
from .band import band_pattern
from .global_ import global_pattern
from .pattern import SparsePattern, no_causal_form

__all__ = ["star_transformer_pattern"]


def star_transformer_pattern(n: int, *, ring: bool = True, causal: bool | str = False) -> SparsePattern:
    r"""The Star-Transformer's ring and radial connections, relay node last.

    .. math::

        J_i = \{\, (i-1) \bmod n,\ i,\ (i+1) \bmod n,\ n \,\} \ (i < n), \qquad
        J_n = \{\, 0, \dots, n \,\}

    Parameters
    ----------
    n : int
        Number of satellite nodes (tokens), >= 0. The pattern has n + 1 rows and columns; the
        relay node *s* is position ``n`` (alone, it attends to itself).
    ring : bool, default True
        ``True``: the paper's ring, satellites 0 and n − 1 are neighbours. ``False``: a path,
        the first and last satellites have one neighbour each (the neighbourhood that fastNLP's
        zero-padded ``unfold`` computes; see Notes).
    causal : {False}, default False
        The Star-Transformer is an encoder: every satellite reads both ring neighbours and the
        relay reads all, so there is no causal form; any other value of ``causal`` is a
        ``ValueError``.

    Returns
    -------
    SparsePattern
        (n + 1, n + 1), nnz = 5n + 1 (ring, n >= 3): 4 keys per satellite, n + 1 for the relay.

    Notes
    -----
    Choices, from the paper's §3.1–3.2 (Alg. 1) and the authors' fastNLP implementation
    (``fastNLP/modules/encoder/star_transformer.py``):

    - *Layout.* The relay is appended as the last position, so a (n + 1)-row input
      ``x = [h_1; …; h_n; s]`` attends with this pattern; satellite indices are token indices.
    - *Ring.* The paper joins adjacent satellites into a ring-shaped structure (Fig. 1), so
      ``ring=True`` wraps around. fastNLP gathers the neighbours with ``F.unfold`` and zero
      padding, so its first and last satellites have no wrap-around neighbour; the padded slot
      then enters the softmax as a zero key (score 0, value 0), which no pattern can express.
      ``ring=False`` is the closest pattern.
    - *Satellite context.* Alg. 1 updates
      :math:`h_i^t = \mathrm{MultiAtt}(h_i^{t-1}, [h_{i-1}^{t-1}; h_i^{t-1}; h_{i+1}^{t-1}; e_i; s^{t-1}])`.
      The token embedding :math:`e_i` is an extra key outside the n + 1 states, not part of this
      pattern; append it as a separate key if you need it.
    - *Relay.* :math:`s^t = \mathrm{MultiAtt}(s^{t-1}, [s^{t-1}; H^t])`: all satellites and
      itself. The paper updates the satellites first and the relay from the *new* satellite
      states; one ``sparse_attention`` call with this pattern is the single-step (survey Fig. 5a)
      view, which the two-phase update applies in two half-steps.
    - For n ≤ 2 the ring neighbours coincide and are kept once.

    References
    ----------
    .. [1] Q. Guo, X. Qiu, P. Liu, Y. Shao, X. Xue, Z. Zhang, "Star-Transformer", NAACL 2019,
       arXiv:1902.09113v3, §3.1 (ring and radial connections, Fig. 1), §3.2 (Alg. 1).

    Examples
    --------
    >>> star_transformer_pattern(4).to_mask().astype(int)
    array([[1, 1, 0, 1, 1],
           [1, 1, 1, 0, 1],
           [0, 1, 1, 1, 1],
           [1, 0, 1, 1, 1],
           [1, 1, 1, 1, 1]])
    >>> star_transformer_pattern(4, ring=False).row(0).tolist()
    [0, 1, 4]
    """
    n, _ = check_sizes(n, None)
    ring = check_bool("ring", ring)
    no_causal_form(causal, "the Star-Transformer", "an encoder whose relay reads every satellite")
    relay = n
    pattern = band_pattern(n + 1, 1) | global_pattern(n + 1, [relay])   # path + radial edges
    if ring and n > 2:
        pattern = pattern | SparsePattern.from_pairs([0, n - 1], [n - 1, 0], n + 1, n + 1)
    return pattern


def _star_transformer(n, m, causal, rng, ring=True):
    """n − 1 satellites and the relay as the last position"""
    if n < 1:
        raise ValueError(f"star_transformer puts the relay node at the last position, after n − 1 satellites: "
                         f"n must be >= 1, got n={n}")
    return star_transformer_pattern(n - 1, ring=ring)


RECORD = Mechanism(
    id="star_transformer", title="Star-Transformer (ring + relay node)", family="sparse", section="4.1.1.2 (Fig. 5a)",
    paper='Q. Guo et al., 2019, "Star-Transformer", arXiv:1902.09113',
    equation=r"J_i = \{i-1, i, i+1, \text{relay}\},\ J_\text{relay} = \text{all}", time="O(n·d)", memory="O(n)",
    kind="attention", methods=("equation", "csr", "bsr", "auto"), function=star_transformer_pattern,
    apply=pattern_apply(_star_transformer, "star_transformer", cross=False, causal_ok=False), causal=False,
    position_dependent=True, cross=False, figure="refattn.figures.sparse:star_transformer", exact_options=None,
    exact_limit="none: every satellite keeps degree 4 (i − 1, i, i + 1 and the relay) at any length",
)
