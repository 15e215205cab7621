"""Paired statistics for two arms measured on the same cases: the exact McNemar test over the
cases that flipped, and a seeded paired bootstrap of the pass-rate difference.

Pure functions over numbers; `report/compare.py` decides what the numbers are fed and what they
mean. Both statistics are paired: a case is compared with itself in the other arm, which is what
makes a small set usable at all (two independent rates over 18 cases would need a difference of
about 30 points before their intervals parted).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 20261201  # any fixed number; printed with every interval so it can be re-drawn


def mcnemar_exact_p(fixed: int, broken: int) -> float:
    """The exact two-sided McNemar p over the discordant cases.

    If the change did nothing, each case that flipped was as likely to flip one way as the
    other, so the smaller of the two counts follows Binomial(fixed + broken, 1/2). The p-value is
    twice that tail, P(X <= min(fixed, broken)), capped at 1; with no flip at all it is 1.
    Summed exactly with integers (no normal approximation, which misleads below ~25 flips).
    """
    if fixed < 0 or broken < 0:
        raise ValueError(f"flip counts must not be negative: {fixed}, {broken}")
    n = fixed + broken
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(fixed, broken) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2 ** n)))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of already sorted values, interpolating linearly between the two
    nearest ranks (position q * (n - 1), the common default of spreadsheet and numpy)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    position = q * (len(sorted_values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(sorted_values) - 1)
    weight = position - below
    return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * weight


def paired_bootstrap(differences: Sequence[float], *, seed: int = DEFAULT_SEED,
                     resamples: int = DEFAULT_RESAMPLES,
                     level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of the mean per-case difference, resampling cases.

    Args:
        differences: one number per case decided in both arms: candidate minus base (pass
            fractions, so each is in [-1, 1]; with one sample per case, -1, 0 or 1).
        seed: seeds `random.Random`, so the same inputs and seed give the same interval.
        resamples: how many resampled sets of cases are drawn.
        level: the interval's coverage (0.95 for a 95% interval).

    Returns:
        (low, high) of the mean difference, in the units of `differences`; None with no case.

    Cases are drawn with replacement, each draw keeping a case's two arms together: that is
    what pairs the bootstrap. Rounding is left to the caller.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    n = len(differences)
    if n == 0:
        return None
    rng = random.Random(seed)
    values = list(differences)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return percentile(means, tail), percentile(means, 1 - tail)
