"""Paired statistics: the exact McNemar p and the paired bootstrap, checked against numbers worked
out by hand (binomial sums written term by term, bootstrap distributions enumerated)."""

from __future__ import annotations

import bisect
import math
import random
import statistics

import pytest
from malloy_evals.report.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap,
    cell_bootstrap,
    cell_resamples,
    mcnemar_exact_p,
    paired_bootstrap,
    percentile,
)

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


# ------------------------------------------------------- the bootstrap drawn from the cell counts


def _case_level_draws(differences, *, seed, resamples):
    """The case-level bootstrap's own resampled means (every case re-drawn), kept as they come."""
    drawn = []

    def mean(sample):
        drawn.append(sum(sample) / len(sample))
        return drawn[-1]

    bootstrap(list(differences), mean, seed=seed, resamples=resamples, level=0.95)
    return sorted(drawn)


def _ks(first, second):
    """The two-sample Kolmogorov-Smirnov distance of two sorted samples."""
    values = sorted(set(first) | set(second))
    return max(abs(bisect.bisect_right(first, v) / len(first)
                   - bisect.bisect_right(second, v) / len(second)) for v in values)


@pytest.mark.parametrize("b_only,a_only,same", [(30, 18, 152), (3, 1, 36), (0, 7, 13),
                                                 (700, 650, 3650)])
def test_cell_draws_follow_the_case_level_bootstrap(b_only, a_only, same):
    diffs = [1] * b_only + [-1] * a_only + [0] * same
    rng = random.Random(5)
    rng.shuffle(diffs)
    resamples = 20_000
    cases = _case_level_draws(diffs, seed=101, resamples=resamples)
    cells = cell_resamples(b_only, a_only, same, seed=202, resamples=resamples)
    # Two samples of one distribution: the KS distance stays under its 0.1% critical value.
    critical = 1.95 * math.sqrt(2 / resamples)
    assert _ks(cases, cells) < critical
    # ... and the same check tells apart a table with three more fixes.
    assert _ks(cases, cell_resamples(b_only + 3, a_only, same - 3, seed=202,
                                     resamples=resamples)) > critical
    # The draws' mean and variance are the multinomial's.
    n = len(diffs)
    mean = (b_only - a_only) / n
    variance = ((b_only + a_only) / n - mean ** 2) / n
    assert statistics.fmean(cells) == pytest.approx(mean, abs=4 * math.sqrt(variance / resamples))
    assert statistics.pvariance(cells) == pytest.approx(variance, rel=0.05)


def test_paired_bootstrap_of_binary_differences_draws_from_the_cells():
    diffs = [1, 0, -1, 0, 0, 1, 1, 0, 0, 0, -1, 1]
    assert paired_bootstrap(diffs, seed=9, resamples=3000) == cell_bootstrap(
        4, 2, 6, seed=9, resamples=3000)
    # Fractions (k samples per case) are still re-drawn case by case.
    fractions = [*diffs, 0.5]
    assert paired_bootstrap(fractions, seed=9, resamples=3000) == bootstrap(
        fractions, lambda d: math.fsum(d) / len(d), seed=9, resamples=3000, level=0.95)


def test_cell_bootstrap_intervals_match_the_case_level_ones():
    # One seed each, 10,000 resamples: the two 95% intervals differ by at most a step (1/n).
    diffs = [1] * 41 + [-1] * 25 + [0] * 134
    case_level = bootstrap(diffs, lambda d: sum(d) / len(d), seed=DEFAULT_SEED,
                           resamples=DEFAULT_RESAMPLES, level=0.95)
    cells = cell_bootstrap(41, 25, 134)
    assert cells is not None and case_level is not None
    for ours, theirs in zip(cells, case_level, strict=True):
        assert abs(ours - theirs) <= 1 / len(diffs) + 1e-12


def test_cell_bootstrap_edges():
    assert cell_bootstrap(0, 0, 0) is None
    assert cell_bootstrap(0, 0, 12, seed=1, resamples=200) == (0.0, 0.0)
    assert cell_bootstrap(5, 0, 0, seed=1, resamples=200) == (1.0, 1.0)
    assert cell_bootstrap(2, 2, 0, seed=4, resamples=50) == cell_bootstrap(2, 2, 0, seed=4,
                                                                           resamples=50)
    with pytest.raises(ValueError):
        cell_bootstrap(-1, 0, 3)
    with pytest.raises(ValueError):
        cell_bootstrap(1, 0, 3, resamples=0)
