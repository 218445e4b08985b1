"""Statistics for comparing runs, on scipy (the t distribution) and statsmodels (power): mean,
sample standard deviation, the 95% confidence interval of a mean (Student t), Welch's two-sample
t-test, the paired t-test (runs of one seed), and how much a comparison of n runs a side can see:

  detectable_difference(sd, n): the smallest true difference of means that a two-sided Welch /
      Student test at the 5% level finds with 80% power, with n runs a side and the runs' standard
      deviation sd (statsmodels TTestIndPower, the noncentral t distribution);
  runs_needed(delta, sd): runs a side for that power against a true difference delta (math.inf
      when more than MAX_RUNS would be needed: the search stops there); with paired=True, pairs
      of runs for the paired t-test, sd the differences' (statsmodels TTestPower);
  paired_ci(x, y): the mean of the differences x[i] - y[i] and its 95% confidence interval.
Debian: python3-scipy, python3-statsmodels (scripts/setup.sh installs them)."""
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tool_errors import require  # noqa: E402

require("scipy", "statsmodels")
from scipy import optimize, stats  # noqa: E402
from statsmodels.stats.power import TTestIndPower, TTestPower  # noqa: E402

ALPHA, POWER = 0.05, 0.8
MAX_RUNS = 1_000_000  # runs_needed looks no further: "more than a million runs" is the answer
# an effect this many standard deviations large is found with power 1 (to double precision) by 2
# runs a side or 2 pairs; past it scipy's noncentral t aborts the process (boost's rounding error,
# seen at 8e12: a difference over a spread of rounding noise), so the power is not computed
BIG_EFFECT = 1000.0


def mean(x):
    return sum(x) / len(x)


def std(x):
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(x) < 2:
        return 0.0
    m = mean(x)
    return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


def t_sf2(t, df):
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom."""
    return float(2 * stats.t.sf(abs(t), df))


def t_quantile(p, df):
    """The t value with P(T <= t) = p."""
    return float(stats.t.ppf(p, df))


def ci95(x):
    """Half-width of the 95% confidence interval of the mean (nan for fewer than 2 values)."""
    if len(x) < 2:
        return math.nan
    return t_quantile(0.975, len(x) - 1) * std(x) / math.sqrt(len(x))


def welch(x, y):
    """Welch's t-test: (t, degrees of freedom, two-sided p). Identical constant samples give p = 1."""
    if len(x) < 2 or len(y) < 2:
        return math.nan, math.nan, math.nan
    vx, vy = std(x) ** 2 / len(x), std(y) ** 2 / len(y)
    diff = mean(x) - mean(y)
    if vx + vy == 0:
        return (0.0, math.inf, 1.0) if diff == 0 else (math.copysign(math.inf, diff), math.inf, 0.0)
    res = stats.ttest_ind(x, y, equal_var=False)
    df = (vx + vy) ** 2 / ((vx ** 2 / (len(x) - 1) if vx else 0) + (vy ** 2 / (len(y) - 1) if vy else 0))
    return float(res.statistic), df, float(res.pvalue)


def welch_ci(x, y):
    """mean(x) - mean(y) and the half-width of its 95% confidence interval (Welch: the t quantile
    at Welch's degrees of freedom); nan half-width for fewer than 2 values a side."""
    if not x or not y:
        return math.nan, math.nan
    diff = mean(x) - mean(y)
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan
    vx, vy = std(x) ** 2 / len(x), std(y) ** 2 / len(y)
    if vx + vy == 0:
        return diff, 0.0
    df = (vx + vy) ** 2 / ((vx ** 2 / (len(x) - 1)) + (vy ** 2 / (len(y) - 1)))
    return diff, t_quantile(0.975, df) * math.sqrt(vx + vy)


def paired(x, y):
    """Paired t-test of x[i] against y[i] (runs of the same seed): (mean of x - y, standard
    deviation of the differences, t, degrees of freedom, two-sided p; scipy's ttest_rel).
    Identical pairs give p = 1."""
    if len(x) != len(y) or len(x) < 2:
        return math.nan, math.nan, math.nan, math.nan, math.nan
    d = [a - b for a, b in zip(x, y)]
    m, sd = mean(d), std(d)
    if sd == 0:
        return (m, 0.0, 0.0, len(d) - 1, 1.0) if m == 0 else (m, 0.0, math.copysign(math.inf, m), len(d) - 1, 0.0)
    res = stats.ttest_rel(x, y)
    return m, sd, float(res.statistic), len(d) - 1, float(res.pvalue)


def paired_ci(x, y):
    """(mean of x[i] - y[i], half-width of its 95% confidence interval: Student t with n - 1
    degrees of freedom); nan half-width for fewer than 2 pairs."""
    d = [a - b for a, b in zip(x, y)]
    if not d:
        return math.nan, math.nan
    return mean(d), ci95(d)


def pooled_std(x, y):
    """The common standard deviation of two samples (pooled variance)."""
    nx, ny = len(x), len(y)
    if nx + ny < 3:
        return math.nan
    return math.sqrt(((nx - 1) * std(x) ** 2 + (ny - 1) * std(y) ** 2) / (nx + ny - 2))


def power_of(effect_size, n, alpha=ALPHA):
    """Power of the two-sided two-sample t-test with n runs a side against a true difference of
    effect_size standard deviations (statsmodels TTestIndPower: the noncentral t distribution)."""
    if effect_size >= BIG_EFFECT:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(TTestIndPower().power(effect_size=effect_size, nobs1=n, alpha=alpha, ratio=1.0, alternative="two-sided"))


def power_of_paired(effect_size, n, alpha=ALPHA):
    """Power of the two-sided paired t-test (a one-sample test of the differences) with n pairs
    against a true mean difference of effect_size standard deviations of the differences
    (statsmodels TTestPower)."""
    if effect_size >= BIG_EFFECT:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(TTestPower().power(effect_size=effect_size, nobs=n, alpha=alpha, alternative="two-sided"))


def detectable_difference(sd, n, alpha=ALPHA, power=POWER):
    """Smallest true difference of means found with this power at this level, n runs a side."""
    if not (n >= 2 and sd >= 0 and math.isfinite(sd)):
        return math.nan
    if sd == 0:
        return 0.0
    # power grows with the effect size: the root of power(d) = target, bracketed (solve_power's own
    # search fails to converge for small n)
    d = optimize.brentq(lambda e: power_of(e, n, alpha) - power, 1e-9, 1e3, xtol=1e-12)
    return d * sd


def runs_needed(delta, sd, alpha=ALPHA, power=POWER, paired=False):
    """Runs a side (at least 2) to find a true difference delta with this power at this level;
    math.inf when more than MAX_RUNS would be needed. Power grows with n, so the answer is found
    by doubling n and then bisecting: about 2 log2(n) evaluations of the power, whatever the
    spread (a walk n by n would take millions when delta is small against sd). paired: pairs of
    runs (one seed each) for the paired t-test, sd the differences' standard deviation."""
    if not (delta > 0 and sd > 0 and math.isfinite(delta) and math.isfinite(sd)):
        return math.nan
    effect = delta / sd
    pw = power_of_paired if paired else power_of
    if pw(effect, 2, alpha) >= power:
        return 2
    lo, hi = 2, 4  # power(lo) < target
    while pw(effect, hi, alpha) < power:
        if hi >= MAX_RUNS:
            return math.inf
        lo, hi = hi, min(2 * hi, MAX_RUNS)
    while hi - lo > 1:  # power(lo) < target <= power(hi)
        mid = (lo + hi) // 2
        if pw(effect, mid, alpha) < power:
            lo = mid
        else:
            hi = mid
    return hi


# ------------------------------------------------------------------------------ the record check
RECORD_ALPHA = 0.01  # modded-nanogpt accepts a record when p < 0.01


def p_below(x, target):
    """One-sided p that the mean of x is below target: scipy.stats.ttest_1samp(x, target,
    alternative='less'), the test modded-nanogpt's records state. nan for fewer than 2 values or
    no spread (the t statistic is undefined there; the caller says so)."""
    if len(x) < 2 or std(x) == 0:
        return math.nan
    return float(stats.ttest_1samp(x, target, alternative="less").pvalue)


def p_below_at(m, sd, n, target):
    """The same test's p for n runs of mean m and sample standard deviation sd."""
    return float(stats.t.cdf((m - target) / (sd / math.sqrt(n)), n - 1))


def runs_to_pass(m, sd, target, alpha=RECORD_ALPHA):
    """The smallest n (at least 2) for which n runs of exactly this mean and sample standard
    deviation give p_below < alpha; math.inf when the mean is not below target or more than
    MAX_RUNS would be needed; nan when sd is not a positive finite number. p falls as n grows (the
    t statistic grows as sqrt(n), the t distribution's tail thins), so the answer is found by
    doubling n and then bisecting."""
    if not (math.isfinite(m) and math.isfinite(sd) and sd > 0 and math.isfinite(target)):
        return math.nan
    if m >= target:
        return math.inf
    if p_below_at(m, sd, 2, target) < alpha:
        return 2
    lo, hi = 2, 4  # p(lo) >= alpha
    while p_below_at(m, sd, hi, target) >= alpha:
        if hi >= MAX_RUNS:
            return math.inf
        lo, hi = hi, min(2 * hi, MAX_RUNS)
    while hi - lo > 1:  # p(lo) >= alpha > p(hi)
        mid = (lo + hi) // 2
        if p_below_at(m, sd, mid, target) < alpha:
            hi = mid
        else:
            lo = mid
    return hi
