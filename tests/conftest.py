"""Shared fixtures and settings for the test suite.

Hypothesis runs derandomised (a fixed seed derived from each test), so every run of the suite
draws the same examples: a failure is reproducible and CI is not flaky.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "refattn", derandomize=True, max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("refattn")


@pytest.fixture
def rng() -> np.random.Generator:
    """The one seeded generator tests draw from (no global seeding anywhere)."""
    return np.random.default_rng(20170612)   # arXiv:1706.03762 v1 date
