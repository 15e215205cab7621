"""Paired statistics for two arms measured on the same cases: the exact McNemar test over the
cases that flipped, and a seeded paired bootstrap of the pass-rate difference.

Pure functions over numbers; `report/compare.py` decides what the numbers are fed and what they
mean. Both statistics are paired: a case is compared with itself in the other arm, which is what
makes a small set usable at all (two independent rates over 18 cases would need a difference of
about 30 points before their intervals parted).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TypeVar

T = TypeVar("T")

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
    what pairs the bootstrap. With one sample per case every difference is -1, 0 or 1, and the
    resampled mean depends only on how many of each were drawn: the draw is then made from the
    cell counts (`cell_bootstrap`), the same distribution at a cost that does not grow with the
    number of cases. Rounding is left to the caller.
    """
    values = list(differences)
    if values and all(d in (-1, 0, 1) for d in values):
        return cell_bootstrap(values.count(1), values.count(-1), values.count(0), seed=seed,
                              resamples=resamples, level=level)
    return bootstrap(values, lambda drawn: math.fsum(drawn) / len(drawn), seed=seed,
                     resamples=resamples, level=level)


def _binomial_cdf(n: int, p: float) -> list[float]:
    """P(X <= k) for k = 0..n, X ~ Binomial(n, p), from log-probabilities (no overflow at any n)."""
    if p <= 0.0:
        return [1.0] * (n + 1)
    if p >= 1.0:
        return [0.0] * n + [1.0]
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    total, out = 0.0, []
    for k in range(n + 1):
        total += math.exp(log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                          + k * log_p + (n - k) * log_q)
        out.append(total)
    out[-1] = max(out[-1], 1.0)  # rounding must never leave a draw above the last step
    return out


class _Binomials:
    """Seeded Binomial(n, p) draws by inverting the distribution function, one table per n."""

    def __init__(self, rng: random.Random, p: float) -> None:
        self.rng, self.p = rng, p
        self.tables: dict[int, list[float]] = {}

    def draw(self, n: int) -> int:
        table = self.tables.get(n)
        if table is None:
            table = self.tables[n] = _binomial_cdf(n, self.p)
        return min(bisect.bisect_right(table, self.rng.random()), n)


def cell_bootstrap(b_only: int, a_only: int, same: int, *, seed: int = DEFAULT_SEED,
                   resamples: int = DEFAULT_RESAMPLES,
                   level: float = 0.95) -> tuple[float, float] | None:
    """`paired_bootstrap` of binary outcomes, drawn from the paired table's cells.

    Args:
        b_only: cases that pass in the second arm only (difference +1: fixed).
        a_only: cases that pass in the first arm only (difference -1: broken).
        same: cases whose arms agree, both passing or both failing (difference 0; the two
            concordant cells are one cell here, as the mean difference cannot tell them apart).

    Re-sampling n cases with replacement draws the cell counts from Multinomial(n; the cells'
    shares). Each resample draws it as two binomials: the discordant cases
    d ~ Binomial(n, (a_only + b_only) / n), then the fixed among them ~ Binomial(d, b_only /
    (a_only + b_only)); the mean difference is (fixed - (d - fixed)) / n. Seeded by `seed` as
    the case-level draw is, so one seed gives one interval; None with no case.
    """
    drawn = cell_resamples(b_only, a_only, same, seed=seed, resamples=resamples)
    if not drawn:
        return None
    tail = (1 - level) / 2
    return percentile(drawn, tail), percentile(drawn, 1 - tail)


def bootstrap(values: Sequence[T], statistic: Callable[[list[T]], float], *, seed: int,
              resamples: int, level: float) -> tuple[float, float] | None:
    """The percentile interval of `statistic` over `resamples` seeded draws of `values` with
    replacement (as many as there are); None with no value."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    n = len(values)
    if n == 0:
        return None
    rng = random.Random(seed)
    drawn = sorted(statistic(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    return percentile(drawn, tail), percentile(drawn, 1 - tail)



def cell_resamples(b_only: int, a_only: int, same: int, *, seed: int = DEFAULT_SEED,
                   resamples: int = DEFAULT_RESAMPLES) -> list[float]:
    """The sorted resampled mean differences `cell_bootstrap` takes its interval from (empty
    with no case)."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    if min(b_only, a_only, same) < 0:
        raise ValueError(f"cell counts must not be negative: {b_only}, {a_only}, {same}")
    n = b_only + a_only + same
    if n == 0:
        return []
    discordant = a_only + b_only
    rng = random.Random(seed)
    flips = _Binomials(rng, discordant / n)
    fixes = _Binomials(rng, b_only / discordant if discordant else 0.0)
    drawn = []
    for _ in range(resamples):
        d = flips.draw(n)
        fixed = fixes.draw(d)
        drawn.append((2 * fixed - d) / n)
    drawn.sort()
    return drawn


# --------------------------------------------------------------------------- agreement and k samples

Z95 = 1.959963984540054  # two-sided 95%: the normal quantile at 0.975


def wilson_interval(passed: int, total: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for passed/total as fractions; None when total is 0.

    Wilson rather than the normal approximation because runs are small and rates sit near 0 or 1,
    where p +- z*sqrt(p(1-p)/n) leaves [0, 1] or collapses to a point.
    """
    if total <= 0:
        return None
    p = passed / total
    z2 = z * z
    denom = 1 + z2 / total
    centre = (p + z2 / (2 * total)) / denom
    half = (z / denom) * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e).

    p_o is the share of pairs the raters agree on; p_e the agreement two raters with these
    marginals would reach by chance (the sum over labels of the product of each rater's share).
    None with no pair, or when chance agreement is already total (both raters used one label
    throughout): kappa is 0/0 there, and a number would pretend to measure something.
    """
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    first: dict[str, int] = {}
    second: dict[str, int] = {}
    for a, b in pairs:
        first[a] = first.get(a, 0) + 1
        second[b] = second.get(b, 0) + 1
    chance = math.fsum(first[label] * second.get(label, 0) for label in first) / (n * n)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1 - chance)


def kappa_bootstrap(pairs: Sequence[tuple[str, str]], *, seed: int = DEFAULT_SEED,
                    resamples: int = DEFAULT_RESAMPLES,
                    level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of Cohen's kappa, resampling pairs with replacement (seeded).

    A resample whose raters both used one label throughout agrees totally, so it counts as
    kappa 1 (its kappa is 0/0; see `cohen_kappa`). None with no pair.
    """
    def kappa_or_1(drawn: list[tuple[str, str]]) -> float:
        k = cohen_kappa(drawn)
        return 1.0 if k is None else k

    return bootstrap(list(pairs), kappa_or_1, seed=seed, resamples=resamples, level=level)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn without replacement from n, c of them
    correct, is correct: 1 - C(n-c, k) / C(n, k) (with n == k: 1 when any sample passed)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, not n={n} c={c} k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The chance that all of k samples drawn without replacement from n are correct:
    C(c, k) / C(n, k) (with n == k: 1 only when every sample passed)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, not n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


def mean_bootstrap(values: Sequence[float], *, seed: int = DEFAULT_SEED,
                   resamples: int = DEFAULT_RESAMPLES,
                   level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of a mean, resampling the values with replacement (seeded);
    None with no value. One value per case: the case is the unit that was sampled."""
    return paired_bootstrap(values, seed=seed, resamples=resamples, level=level)


def sample_figures(cases: Sequence[tuple[int, int]], *, seed: int = DEFAULT_SEED,
                   resamples: int = DEFAULT_RESAMPLES) -> dict[str, float | int | list[float] | None]:
    """The k-sample figures of a run from (matched, decided) per case, over the cases with at
    least one decided sample: pass@1 (the mean per-case fraction, with a seeded bootstrap
    interval over cases), pass@k (the share of cases where any sample matched) and pass^k (where
    every sample matched), each with its Wilson interval, and the majority figure (cases where
    more than half matched). k is each case's decided samples (K when every one was decided)."""
    decided = [(c, n) for c, n in cases if n > 0]
    if not decided:
        return {"cases": 0, "pass_at_1": None, "pass_at_1_ci": None, "pass_at_k": None,
                "pass_at_k_ci": None, "pass_hat_k": None, "pass_hat_k_ci": None,
                "majority": None, "majority_ci": None}
    total = len(decided)
    fractions = [c / n for c, n in decided]
    any_pass = sum(1 for c, n in decided if pass_at_k(n, c, n) == 1.0)
    all_pass = sum(1 for c, n in decided if pass_hat_k(n, c, n) == 1.0)
    majority = sum(1 for c, n in decided if 2 * c > n)

    def ci(interval: tuple[float, float] | None) -> list[float] | None:
        return [round(interval[0], 4), round(interval[1], 4)] if interval else None

    return {"cases": total,
            "pass_at_1": round(math.fsum(fractions) / total, 4),
            "pass_at_1_ci": ci(mean_bootstrap(fractions, seed=seed, resamples=resamples)),
            "pass_at_k": round(any_pass / total, 4), "pass_at_k_ci": ci(wilson_interval(any_pass, total)),
            "pass_hat_k": round(all_pass / total, 4), "pass_hat_k_ci": ci(wilson_interval(all_pass, total)),
            "majority": round(majority / total, 4), "majority_ci": ci(wilson_interval(majority, total))}


def sign_flip_p(differences: Sequence[float], *, seed: int = DEFAULT_SEED,
                resamples: int = DEFAULT_RESAMPLES) -> float:
    """The two-sided paired sign-flip (permutation) test of a mean per-case difference.

    If the change did nothing, each case's difference was as likely to have the other sign, so
    the observed |mean| is compared with the means of every sign pattern: exactly (all 2^n of
    them) up to 16 non-zero differences, else over `resamples` seeded random patterns, counting
    the observed one (p never 0). Cases with no difference change no pattern and are left out.
    """
    values = [d for d in differences if d != 0]
    n = len(values)
    if n == 0:
        return 1.0
    observed = abs(math.fsum(values)) - 1e-12
    if n <= 16:
        hits = 0
        for mask in range(2 ** n):
            total = math.fsum(-v if mask >> i & 1 else v for i, v in enumerate(values))
            hits += abs(total) >= observed
        return hits / 2 ** n
    rng = random.Random(seed)
    hits = 1
    for _ in range(resamples):
        total = math.fsum(v if rng.random() < 0.5 else -v for v in values)
        hits += abs(total) >= observed
    return hits / (resamples + 1)
