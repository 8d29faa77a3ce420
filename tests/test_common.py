"""refattn.common: the shared checks and the memory budget."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import common


@pytest.fixture
def restore_budget():
    previous = common.set_memory_budget(None)
    yield
    common.set_memory_budget(previous)


def test_memory_budget_default_environment_and_setting(monkeypatch, restore_budget):
    monkeypatch.delenv(common.MEMORY_BUDGET_ENV, raising=False)
    assert common.memory_budget() == common.DEFAULT_MEMORY_BUDGET == 4 * 2**30
    monkeypatch.setenv(common.MEMORY_BUDGET_ENV, "1000")
    assert common.memory_budget() == 1000
    assert common.set_memory_budget(500) is None
    assert common.memory_budget() == 500                          # the setting wins over the environment
    assert common.set_memory_budget(None) == 500
    assert common.memory_budget() == 1000
    monkeypatch.setenv(common.MEMORY_BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="REFATTN_MEMORY_BUDGET must be a whole number of bytes, got 'lots'"):
        common.memory_budget()
    with pytest.raises(ValueError, match="nbytes must be a positive int, got 0"):
        common.set_memory_budget(0)


def test_check_fits_refuses_before_allocating_and_names_the_size(restore_budget):
    common.set_memory_budget(800)
    common.check_fits("a", (10, 10))                               # exactly 800 bytes: fits
    with pytest.raises(common.MemoryBudgetError, match=r"the weights of shape \(10, 11\) would take 8.2e-07 GiB, "
                                                        r"above the memory budget of 7.45e-07 GiB"):
        common.check_fits("the weights", (10, 11))
    assert issubclass(common.MemoryBudgetError, ValueError) and issubclass(common.MemoryBudgetError, MemoryError)


@pytest.mark.parametrize(("check", "value", "error", "match"), [
    (common.check_bool, 1, TypeError, "flag must be True or False, got 1"),
    (common.check_bool, np.True_, None, None),
    (common.check_positive_int, True, ValueError, "flag must be a positive int, got True"),
    (common.check_positive_int, 2.0, ValueError, "flag must be a positive int, got 2.0"),
    (common.check_non_negative_int, -1, ValueError, "flag must be a non-negative int, got -1"),
    (common.check_non_negative_int, np.int8(0), None, None),
    (common.check_non_negative_int, 2**62, None, None),
    (common.check_positive_int, 10**30, ValueError, r"^flag=10{30} is too large: sizes and counts must be at most"),
    (common.check_non_negative_int, 2**62 + 1, ValueError, r"^flag=4611686018427387905 is too large"),
    (common.check_scale, 10**400, ValueError, r"^flag must be finite, got 10{400}$"),
    (common.check_scale, np.nan, ValueError, r"^flag must be finite, got nan$"),
])
def test_scalar_checks_name_the_argument(check, value, error, match):
    if error is None:
        assert check("flag", value) == value
    elif check is common.check_scale:                              # its name comes second
        with pytest.raises(error, match=match):
            check(value, "flag")
    else:
        with pytest.raises(error, match=match):
            check("flag", value)


def test_as_rng_names_the_argument():
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator or an int seed, got NoneType"):
        common.as_rng(None)
    generator = np.random.default_rng(1)
    assert common.as_rng(generator) is generator
    np.testing.assert_array_equal(common.as_rng(3).random(2), np.random.default_rng(3).random(2))
