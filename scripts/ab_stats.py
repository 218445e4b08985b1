"""Statistics for comparing runs: mean, sample standard deviation, 95% confidence interval of
the mean (Student t), and Welch's two-sample t-test with its two-sided p-value. Plain Python
(the t distribution through the regularised incomplete beta function), so nothing beyond the
standard library is needed."""
import math


def mean(x):
    return sum(x) / len(x)


def std(x):
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(x) < 2:
        return 0.0
    m = mean(x)
    return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


def _betacf(a, b, x):
    # continued fraction of the incomplete beta function (modified Lentz)
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_sf2(t, df):
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p, df):
    """The t value with P(T <= t) = p (p > 0.5), by bisection on the tail probability."""
    target = 2 * (1 - p)
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_sf2(mid, df) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


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
    t = diff / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / ((vx ** 2 / (len(x) - 1) if vx else 0) + (vy ** 2 / (len(y) - 1) if vy else 0))
    return t, df, t_sf2(t, df)
