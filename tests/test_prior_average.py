"""Average attention: a hand case, and the limit where softmax attention is uniform too."""
from __future__ import annotations

import numpy as np

from refattn import scaled_dot_product_attention
from refattn.prior import average_attention


def test_hand_case_causal_and_not():
    v = np.array([[2.0], [4.0], [9.0]])                            # running means 2, 3, 5; overall 5
    np.testing.assert_array_equal(average_attention(v, v, v)[:, 0], [2.0, 3.0, 5.0])
    np.testing.assert_array_equal(average_attention(v, v, v, causal=False)[:, 0], [5.0, 5.0, 5.0])


def test_equals_softmax_attention_with_equal_scores(rng):
    """q = 0 makes every score 0, so softmax's weights are uniform over what each row sees (n != m)."""
    q, k, v = np.zeros((4, 3)), rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    for causal in (False, True, "bottom-right"):
        np.testing.assert_allclose(average_attention(q, k, v, causal=causal),
                                   scaled_dot_product_attention(q, k, v, causal=causal), rtol=1e-14, atol=1e-15)
