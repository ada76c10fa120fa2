"""Statistics for boot benchmarks: ratios with bootstrap confidence intervals, and the regression gate's rule.

A ratio compares a subject (mvmm build B, or mvmm) with a reference (build A, QEMU, or a baseline run) on one
metric. Its point estimate is a geometric mean of ratios, so 1.10 and 1/1.10 are equally far from 1:
- paired: the rounds of one run, each holding both variants (they ran next to each other in the same test host
  boot): the geometric mean of the per-round ratios, resampled by round;
- unpaired: two sets of samples (this run against a baseline file): the ratio of their geometric means, each set
  resampled on its own.
The interval is a percentile bootstrap with a fixed seed, so the same data always give the same answer.

The gate (regressed) calls a comparison a regression only when BOTH hold: the point estimate is slower than
1 + threshold, and a one-sided lower confidence bound is above 1 (the slowdown is outside the noise). That bound
is Student's t on the log ratios (paired: the rounds' log ratios; unpaired: Welch's), not the bootstrap: with the
few rounds a benchmark has (3-8), a percentile bootstrap's interval is too narrow and two identical builds would
fail far more often than alpha says. It is taken at 1 - alpha / k for k comparisons (Bonferroni), so that
checking more phases and configurations does not raise the chance that two identical builds fail above
alpha = 5%; with 2 rounds or fewer nothing is outside the noise."""

import math
import random
from dataclasses import asdict, dataclass

from scipy.stats import t as student_t

RESAMPLES = 4000
LEVEL = 0.95
SEED = 1


@dataclass(frozen=True)
class Estimate:
    point: float  # the ratio subject / reference
    lo: float  # the confidence interval
    hi: float
    level: float
    n: int  # rounds (paired) or the smaller sample (unpaired)

    def as_dict(self):
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def percentile(sorted_values, q):
    """The q-quantile (0..1) of sorted values, linearly interpolated."""
    at = q * (len(sorted_values) - 1)
    low = math.floor(at)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (at - low)


def _interval(stats, level):
    stats.sort()
    tail = (1 - level) / 2
    return percentile(stats, tail), percentile(stats, 1 - tail)


def positive(values):
    return [v for v in values if v is not None and v > 0]


def paired_ratio(pairs, level=LEVEL, resamples=RESAMPLES, seed=SEED):
    """pairs: [(subject, reference)] per round. None when no round has both."""
    ratios = [s / r for s, r in pairs if s and r and s > 0 and r > 0]
    if not ratios:
        return None
    rng = random.Random(seed)
    logs = [math.log(x) for x in ratios]
    n = len(logs)
    stats = [math.exp(sum(rng.choices(logs, k=n)) / n) for _ in range(resamples)]
    lo, hi = _interval(stats, level)
    return Estimate(geomean(ratios), lo, hi, level, n)


def unpaired_ratio(subject, reference, level=LEVEL, resamples=RESAMPLES, seed=SEED):
    """subject, reference: samples of one metric from two runs. None when either is empty."""
    subject, reference = positive(subject), positive(reference)
    if not subject or not reference:
        return None
    rng = random.Random(seed)
    ls, lr = [math.log(x) for x in subject], [math.log(x) for x in reference]

    def mean_of_resample(logs):
        return sum(rng.choices(logs, k=len(logs))) / len(logs)

    stats = [math.exp(mean_of_resample(ls) - mean_of_resample(lr)) for _ in range(resamples)]
    lo, hi = _interval(stats, level)
    return Estimate(geomean(subject) / geomean(reference), lo, hi, level, min(len(subject), len(reference)))


def t_quantile(q, df):
    """The q-quantile of Student's t with df degrees of freedom (Welch's df need not be whole)."""
    return float(student_t.ppf(q, df))


def _mean_var(values):
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def paired_lower_bound(pairs, confidence):
    """The one-sided lower bound, at `confidence`, of the geometric mean of the rounds' ratios (Student's t on
    their logs); 0 with fewer than 3 rounds that hold both values (too few to tell a change from noise)."""
    logs = [math.log(s / r) for s, r in pairs if s and r and s > 0 and r > 0]
    if len(logs) < 3:
        return 0.0
    mean, var = _mean_var(logs)
    return math.exp(mean - t_quantile(confidence, len(logs) - 1) * math.sqrt(var / len(logs)))


def unpaired_lower_bound(subject, reference, confidence):
    """The same for two independent samples (Welch's t on the logs); 0 unless each has at least 3 values."""
    ls, lr = [math.log(x) for x in positive(subject)], [math.log(x) for x in positive(reference)]
    if len(ls) < 3 or len(lr) < 3:
        return 0.0
    (ms, vs), (mr, vr) = _mean_var(ls), _mean_var(lr)
    se2 = vs / len(ls) + vr / len(lr)
    if se2 == 0:
        return math.exp(ms - mr)
    df = se2 ** 2 / ((vs / len(ls)) ** 2 / (len(ls) - 1) + (vr / len(lr)) ** 2 / (len(lr) - 1) or 1e-300)
    return math.exp(ms - mr - t_quantile(confidence, max(df, 1)) * math.sqrt(se2))


def gate_confidence(comparisons, alpha=1 - LEVEL):
    """The one-sided confidence of each of k comparisons' lower bounds: 1 - alpha / k (Bonferroni)."""
    return 1 - alpha / max(comparisons, 1)


def regressed(point, lower_bound, threshold):
    """Slower beyond the threshold AND outside the noise (the one-sided lower bound above 1)."""
    return point is not None and point > 1 + threshold and lower_bound > 1
