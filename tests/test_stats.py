"""Paired statistics: the exact McNemar p and the paired bootstrap, checked against numbers worked
out by hand (binomial sums written term by term, bootstrap distributions enumerated)."""

from __future__ import annotations

import pytest
from malloy_evals.report.stats import mcnemar_exact_p, paired_bootstrap, percentile

# ------------------------------------------------------------------------- McNemar, exact
# p = 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1. Each expected value
# below is that sum written out with its binomial coefficients.


@pytest.mark.parametrize("fixed, broken, expected", [
    # n = 7: 2 * (C(7,0) + C(7,1)) / 2^7 = 2 * (1 + 7) / 128
    pytest.param(6, 1, 2 * (1 + 7) / 128, id="6_fixed_1_broken"),
    # n = 5: 2 * C(5,0) / 2^5 = 2 / 32
    pytest.param(5, 0, 2 * 1 / 32, id="5_fixed_0_broken"),
    # n = 12: 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12 = 2 * (1 + 12 + 66) / 4096
    pytest.param(10, 2, 2 * (1 + 12 + 66) / 4096, id="10_fixed_2_broken"),
    # n = 11: 2 * (1 + 11 + 55) / 2048; the direction does not matter
    pytest.param(2, 9, 2 * (1 + 11 + 55) / 2048, id="2_fixed_9_broken"),
    # n = 20: 2 * (1 + 20 + 190 + 1140) / 2^20
    pytest.param(17, 3, 2 * (1 + 20 + 190 + 1140) / 1048576, id="17_fixed_3_broken"),
])
def test_mcnemar_matches_the_binomial_sum_written_out(fixed, broken, expected):
    assert mcnemar_exact_p(fixed, broken) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("fixed, broken", [(0, 0), (1, 0), (3, 3), (4, 5), (1, 2)])
def test_mcnemar_is_capped_at_one_when_the_tail_passes_half(fixed, broken):
    # (3, 3): 2 * (1 + 6 + 15 + 20) / 64 = 84 / 64 > 1; (1, 0): 2 * 1 / 2 = 1.
    assert mcnemar_exact_p(fixed, broken) == 1.0


def test_mcnemar_with_many_flips_stays_exact():
    # 60 fixed, 40 broken: far beyond where 2**n overflows a float; the value is tiny but not 0
    # and agrees with the symmetric call.
    p = mcnemar_exact_p(60, 40)
    assert 0.05 < p < 0.06  # the normal approximation gives 0.0455 (continuity-corrected 0.0574)
    assert p == mcnemar_exact_p(40, 60)


def test_mcnemar_refuses_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)


# ------------------------------------------------------------------------- percentile


def test_percentile_interpolates_between_ranks():
    values = [0.0, 10.0, 20.0, 30.0]
    assert percentile(values, 0.0) == 0.0 and percentile(values, 1.0) == 30.0
    assert percentile(values, 0.5) == 15.0  # position 1.5
    assert percentile(values, 0.25) == pytest.approx(7.5)  # position 0.75


# ------------------------------------------------------------------------- paired bootstrap


def test_bootstrap_of_one_fix_in_four_cases_matches_the_enumerated_distribution():
    # Differences [1, 0, 0, 0]: a resample's mean is K/4 with K ~ Binomial(4, 1/4).
    # P(K=0) = 81/256 (31.6%) > 2.5%, so the 2.5th percentile is 0.
    # P(K=4) = 1/256 (0.4%) < 2.5% < P(K>=3) = 13/256 (5.1%), so the 97.5th percentile is 3/4.
    low, high = paired_bootstrap([1, 0, 0, 0], seed=11, resamples=10_000)
    assert (low, high) == (0.0, 0.75)


def test_bootstrap_of_one_fix_and_one_break_spans_both_ends():
    # Differences [1, -1]: means -1, 0, 1 with probabilities 1/4, 1/2, 1/4.
    assert paired_bootstrap([1, -1], seed=3, resamples=4000) == (-1.0, 1.0)


def test_bootstrap_of_identical_differences_is_a_point():
    assert paired_bootstrap([0.5] * 9, seed=1, resamples=500) == (0.5, 0.5)


def test_bootstrap_is_reproducible_from_its_seed():
    diffs = [1, 0, 0, -1, 1, 1, 0, 0, 0, 1, 0, 0, 2 / 3, -1 / 3]
    first = paired_bootstrap(diffs, seed=42)
    assert paired_bootstrap(diffs, seed=42) == first
    low, high = first
    assert low < sum(diffs) / len(diffs) < high


def test_bootstrap_of_no_case_is_none():
    assert paired_bootstrap([], seed=1) is None


def test_bootstrap_refuses_zero_resamples():
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], resamples=0)
