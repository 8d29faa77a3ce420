"""refattn as an oracle: check another implementation's attention (and gradients) against float64.

- :func:`check` / :func:`assert_close`: compare a candidate's output and gradients with refattn's,
  under FlashAttention's ratio rule (default), a named tolerance table or an ulp bound; a failing
  report names the convention that would match (causal alignment, mask polarity, scale, layout,
  fully-masked policy; :mod:`refattn.oracle.diagnose`).
- Analytic float64 backward passes: :func:`softmax_vjp`, :func:`sdpa_vjp` (also in float32/16,
  the check's gradient baseline), :func:`multi_head_vjp`, :func:`linear_attention_vjp`;
  :func:`merge_attention` combines partial attentions by their log-sum-exp.
- :mod:`refattn.oracle.extended`: the same formulas in 50-digit mpmath (``mp_sdpa``, ...), which
  certifies the float64 paths.
- Fixtures for any language: :func:`export_case` / :func:`check_file`, and on the command line
  ``python -m refattn export`` / ``python -m refattn check FILE.npz``.
- Test vectors of every registered attention mechanism (:mod:`refattn.oracle.vectors`, the format
  documented there): ``python -m refattn export --mechanism ID``, ``python -m refattn vectors --out
  DIR``; :func:`check_mechanism` judges any mechanism's candidate with :func:`check`'s rules.

Note: ``refattn.oracle.check`` is the function; its module is ``refattn.oracle.check`` only through
``from refattn.oracle.check import ...``.
"""
from .check import assert_close, check, check_mechanism
from .checkfile import check_file
from .fixtures import CASES, export_case, make_case
from .linear_vjp import linear_attention_vjp
from .merge import merge_attention
from .report import Comparison, Report
from .tolerances import TABLES
from .vjp import MultiHeadGrads, SdpaGrads, multi_head_vjp, sdpa_vjp, softmax_vjp

__all__ = [
    "CASES",
    "Comparison",
    "MultiHeadGrads",
    "Report",
    "SdpaGrads",
    "TABLES",
    "assert_close",
    "check",
    "check_file",
    "check_mechanism",
    "export_case",
    "linear_attention_vjp",
    "make_case",
    "merge_attention",
    "multi_head_vjp",
    "sdpa_vjp",
    "softmax_vjp",
]
