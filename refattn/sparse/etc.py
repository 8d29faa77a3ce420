r"""ETC global-local attention on [global tokens; long tokens] (survey §4.1.1, Fig. 5c).

g global tokens (positions 0 … g − 1) and L long tokens (positions g … g + L − 1); with a, b the
long tokens' own indices (position g + a):

    g2g:  global → global     all
    g2l:  global → long       all            (hard_g2l: global k → the long tokens of segment k)
    l2g:  long → global       all            (hard_l2g: long a → its segment's global token only)
    l2l:  long a → long b     |a − b| ≤ r    (radius r each side, the token itself included)

In the general case (no hard masks) this is the union of two atomic patterns on the
concatenation, because every band pair that touches a global token is already a global pair:

    etc = global({0, …, g − 1}) | band(r)
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..common.checks import check_bool, check_size, check_window
from ..common.ints import check_non_negative_int
from ..deprecation import renamed
from ..mechanism import Mechanism
from .attention import pattern_apply
from .band import band_pattern
from .global_ import global_pattern
from .pattern import SparsePattern, as_indices, no_causal_form

__all__ = ["etc_pattern"]


@renamed(radius="window")
def etc_pattern(
    num_global: int, num_long: int, window: int, *,
    segment_ids: ArrayLike | None = None, hard_g2l: bool = False, hard_l2g: bool = False,
    causal: bool | str = False,
) -> SparsePattern:
    r"""ETC's global-local attention as one pattern over the g + L concatenated tokens.

    .. math::

        J_k = \{0, \dots, g + L - 1\} \ (k < g), \qquad
        J_{g+a} = \{0, \dots, g-1\} \cup \{\, g + b : |a - b| \le r \,\}

    Parameters
    ----------
    num_global : int
        Number of global tokens *g* >= 0 (positions ``0 … g − 1``).
    num_long : int
        Number of long (regular input) tokens *L* >= 0 (positions ``g … g + L − 1``).
    window : int
        The l2l radius *r* >= 0, a half-width: long token *a* attends to long tokens ``a − r … a + r``,
        itself included (2r + 1 keys before clipping). (The old name ``radius=`` is deprecated.)
    segment_ids : (L,) array_like of int, optional
        The global token (in ``[0, g)``) that summarises each long token's segment, e.g. its
        sentence (the official code's ``sentence_ids``). Required by, and only used with,
        ``hard_g2l`` / ``hard_l2g``.
    hard_g2l : bool, default False
        Global token *k* attends only to the long tokens with ``segment_ids == k`` (g2g stays
        full).
    hard_l2g : bool, default False
        Long token *a* attends only to the global token ``segment_ids[a]`` (its l2l window is
        unchanged).
    causal : {False}, default False
        ETC is an encoder (global tokens read every long token), with no causal form; any other
        value of ``causal`` is a ``ValueError``.

    Returns
    -------
    SparsePattern
        (g + L, g + L); general case nnz = g·(g + L) + L·g + Σ_a |window_a|.

    Notes
    -----
    Conventions checked against the official code (google-research ``etcmodel``):

    - *Radius.* ``local_radius`` is "how many tokens to the left/right to locally attend to ...
      a value of 1 would allow each token to only attend to 1 token to the left and 1 token to
      the right of it"; the l2l masks have ``2 * local_radius + 1`` slots centred on the token
      (``feature_utils.make_local_segmented_att_mask``), so the window is |a − b| ≤ r with the
      token included. The official relative-position code requires r >= 1; r = 0 (each long
      token sees only itself among long tokens) is allowed here as a limit case.
    - *General case.* The paper's global-local attention restricts only l2l; g2g, g2l and l2g
      are unrestricted. That is the default here.
    - *Hierarchical (structured) inputs.* ``input_utils.make_global_local_transformer_side_inputs``
      offers ``use_hard_g2l_mask`` ("global tokens only attend to tokens of the corresponding
      sentences in the long input") and ``use_hard_l2g_mask`` ("long tokens only attend to ...
      the corresponding global tokens"), both ``False`` by default; ``hard_g2l`` and
      ``hard_l2g`` are these two masks with ``segment_ids`` as ``sentence_ids``. The
      relative-position labels that ETC adds on l2g/g2l pairs (same segment or not) are biases,
      not masks, and do not change the pattern.
    - ETC keeps separate long and global inputs and runs g2g+g2l and l2g+l2l as two fused
      softmaxes; concatenating [global; long] and attending with this pattern is the same
      computation when the projections are shared (``share_qkv_projections=True``).

    References
    ----------
    .. [1] J. Ainslie et al., "ETC: Encoding Long and Structured Inputs in Transformers",
       EMNLP 2020, arXiv:2004.08483v5, §3.2 (global-local attention, Fig. 2), §3.4
       (structured inputs and masking, Fig. 3).

    Examples
    --------
    >>> etc_pattern(1, 5, 1).to_mask().astype(int)
    array([[1, 1, 1, 1, 1, 1],
           [1, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [1, 0, 1, 1, 1, 0],
           [1, 0, 0, 1, 1, 1],
           [1, 0, 0, 0, 1, 1]])
    >>> p = etc_pattern(2, 4, 0, segment_ids=[0, 0, 1, 1], hard_l2g=True)
    >>> p.row(2).tolist(), p.row(5).tolist()
    ([0, 2], [1, 5])
    """
    g = check_size("num_global", num_global)
    L = check_size("num_long", num_long)
    check_size("num_global + num_long", g + L, rows=True)
    r = check_window("window", window, L)                           # r >= n_l: every long token
    hard_g2l, hard_l2g = check_bool("hard_g2l", hard_g2l), check_bool("hard_l2g", hard_l2g)
    no_causal_form(causal, "ETC", "an encoder whose global tokens read every long token")
    N = g + L
    if not (hard_g2l or hard_l2g):
        if segment_ids is not None:
            raise ValueError("segment_ids is only used with hard_g2l=True or hard_l2g=True")
        band = band_pattern(N, r)                                       # l2l (+ pairs already global)
        return global_pattern(N, np.arange(g)) | band if g else band

    seg = _segment_ids(segment_ids, g, L)
    a = np.arange(L)
    G = np.arange(g)
    rows = [np.repeat(G, g), np.tile(G, g)]                             # g2g: all
    if hard_g2l:
        rows += [seg, g + a]                                            # g2l: global k → segment k
    else:
        rows += [np.repeat(G, L), np.tile(g + a, g)]                    # g2l: all
    if hard_l2g:
        rows += [g + a, seg]                                            # l2g: long a → segment_ids[a]
    else:
        rows += [np.repeat(g + a, g), np.tile(G, L)]                    # l2g: all
    globals_ = SparsePattern.from_pairs(np.concatenate(rows[0::2]), np.concatenate(rows[1::2]), N, N)
    i = np.arange(N)
    is_long = i >= g
    long_band = SparsePattern.from_row_ranges(                          # l2l: long a → g + (a − r … a + r)
        np.where(is_long, np.maximum(g, i - r), 0), np.where(is_long, i + r + 1, 0), N)
    return globals_ | long_band


def _segment_ids(segment_ids, g: int, L: int):
    if segment_ids is None:
        raise ValueError("hard_g2l and hard_l2g need segment_ids (the global token of each long token)")
    seg = as_indices("segment_ids", segment_ids)
    if seg.shape != (L,):
        raise ValueError(f"segment_ids must have shape (num_long,) = ({L},), got shape {seg.shape}")
    if L and (seg.min() < 0 or seg.max() >= g):
        raise ValueError(
            f"segment_ids must lie in [0, num_global={g}) (they index global tokens), got values in "
            f"[{seg.min()}, {seg.max()}]"
        )
    return seg.astype(np.int64)


def _etc(n, m, causal, rng, num_global=2, window=1, segment_ids=None, hard_g2l=False, hard_l2g=False):
    """2 global tokens first, l2l window (radius) 1"""
    g = check_non_negative_int("num_global", num_global)
    if n < g:
        raise ValueError(f"etc puts num_global={g} global tokens before the long tokens: n must be >= num_global, "
                         f"got n={n}")
    return etc_pattern(g, n - g, window, segment_ids=segment_ids, hard_g2l=hard_g2l, hard_l2g=hard_l2g)


RECORD = Mechanism(
    id="etc", title="ETC global-local attention", family="sparse", section="4.1.1.2 (Fig. 5c)",
    paper='J. Ainslie et al., 2020, "ETC: Encoding Long and Structured Inputs in Transformers", arXiv:2004.08483',
    equation=r"g2g, g2l, l2g \text{ full};\ l2l: |i-j| \le r", time="O((n_g + r)·n·d)", memory="O((n_g + r)·n)",
    kind="attention",
    methods=("equation", "csr", "bsr", "auto"), function=etc_pattern,
    apply=pattern_apply(_etc, "etc", cross=False, causal_ok=False, renamed={"radius": "window"}),
    causal=False, position_dependent=True, cross=False, figure="refattn.figures.sparse:etc",
    exact_options=lambda n, m: {"window": n}, exact_limit="r ≥ n_l",
)
