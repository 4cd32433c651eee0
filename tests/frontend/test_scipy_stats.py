"""scipy.stats distributions with traced arguments (frontend/scipy_stats.py): values against
SciPy's, gradients against central differences, SciPy's conventions off the support and at
invalid parameters, frozen distributions, and the refusal of formulas adjit cannot trace."""
import numpy as np
import pytest

import adjit
from finite_differences import numgrad

st = pytest.importorskip("scipy.stats")

_RNG = np.random.default_rng(24)
_X = _RNG.normal(size=(5, 3))
_A = _RNG.normal(size=(3, 3))
_S = _A @ _A.T + 3 * np.eye(3)
_M = np.array([0.3, -0.4, 0.8])
_Y = np.array([0.5, 2.0, 3.5])
_K = np.array([0, 2, 5])

# (name, loss of three parameters p): each a way users write a likelihood or a prior
_LOSSES = [
    ("gamma", lambda p: np.sum(st.gamma.logpdf(_Y, np.exp(p[0]), scale=np.exp(p[1])))),
    ("gamma frozen", lambda p: np.sum(st.gamma(np.exp(p[0]), scale=np.exp(p[1])).logpdf(_Y))),
    ("beta", lambda p: np.sum(st.beta.logpdf(_Y / 4, np.exp(p[0]), np.exp(p[1])))),
    ("beta pdf", lambda p: np.sum(st.beta.pdf(_Y / 4, np.exp(p[0]), np.exp(p[1])))),
    ("t", lambda p: np.sum(st.t.logpdf(_Y, df=np.exp(p[0]) + 1, loc=p[1], scale=np.exp(p[2])))),
    ("t frozen", lambda p: np.sum(st.t(np.exp(p[0]), p[1], np.exp(p[2])).logpdf(_Y))),
    ("expon rate", lambda p: np.sum(st.expon.logpdf(_Y, scale=1 / np.exp(p[0])))),
    ("halfnorm", lambda p: np.sum(st.halfnorm.logpdf(_Y, scale=np.exp(p[0])))),
    ("invgamma", lambda p: np.sum(st.invgamma.logpdf(_Y, np.exp(p[0]), scale=np.exp(p[1])))),
    ("lognorm", lambda p: np.sum(st.lognorm.logpdf(_Y, np.exp(p[0]), scale=np.exp(p[1])))),
    ("laplace cdf", lambda p: np.sum(st.laplace.cdf(_Y, p[0], np.exp(p[1])))),
    ("logistic sf", lambda p: np.sum(st.logistic.sf(_Y, p[0], np.exp(p[1])))),
    ("expon ppf", lambda p: np.sum(st.expon.ppf(np.array([0.1, 0.7]), p[0], np.exp(p[1])))),
    ("uniform", lambda p: np.sum(st.uniform.logpdf(_Y, p[0] - 1, 5 + p[1]))),
    ("weibull", lambda p: np.sum(st.weibull_min.logpdf(_Y, np.exp(p[0]), scale=np.exp(p[1])))),
    ("cauchy", lambda p: np.sum(st.cauchy.logpdf(np.array([0.5, 2.0, 30.0]), p[0], np.exp(p[1])))),
    ("poisson", lambda p: np.sum(st.poisson.logpmf(_K, np.exp(p[0])))),
    ("poisson frozen pmf", lambda p: np.sum(st.poisson(np.exp(p[0])).pmf(_K))),
    ("binom pmf", lambda p: np.sum(st.binom.pmf(_K, 6, 1 / (1 + np.exp(-p[0]))))),
    ("nbinom", lambda p: np.sum(st.nbinom.logpmf(_K, np.exp(p[0]), 1 / (1 + np.exp(-p[1]))))),
    ("bernoulli logistic regression",
     lambda w: np.sum(st.bernoulli.logpmf(np.array([0, 1, 1, 0, 1]), 1 / (1 + np.exp(-_X @ w))))),
    ("geom cdf", lambda p: np.sum(st.geom.cdf(_K + 1, 1 / (1 + np.exp(-p[0]))))),
    ("mvn", lambda m: np.sum(st.multivariate_normal.logpdf(_X, m, _S))),
    ("mvn one point", lambda m: st.multivariate_normal.logpdf(_X[0], mean=m, cov=_S)),
    ("mvn pdf", lambda m: np.sum(st.multivariate_normal.pdf(_X, m, _S))),
    ("mvn traced cov", lambda a: np.sum(st.multivariate_normal.logpdf(
        _X, _M, np.outer(a, a) + np.eye(3)))),
    ("mvn frozen", lambda m: np.sum(st.multivariate_normal(mean=m, cov=_S).logpdf(_X))),
    ("mvn diagonal cov", lambda d: np.sum(st.multivariate_normal.logpdf(_X, _M, np.exp(d)))),
    ("mvn 1-d", lambda m: np.sum(st.multivariate_normal.logpdf(_X[:, 0], m[0], 2.0))),
    ("dirichlet", lambda a: st.dirichlet.logpdf(np.array([0.2, 0.3, 0.5]), np.exp(a))),
    ("dirichlet frozen pdf", lambda a: st.dirichlet(np.exp(a)).pdf(np.array([0.2, 0.3, 0.5]))),
    ("dirichlet points", lambda a: np.sum(st.dirichlet.logpdf(
        np.array([[0.2, 0.3], [0.3, 0.3], [0.5, 0.4]]), np.exp(a)))),
]


@pytest.mark.parametrize("name, loss", _LOSSES, ids=[n for n, _ in _LOSSES])
def test_distribution_values_and_gradients(name, loss):
    v = adjit.compile(loss, backend="numpy")(_M)
    assert np.shape(v) == np.shape(loss(_M))
    np.testing.assert_allclose(v, loss(_M), rtol=1e-11)
    np.testing.assert_allclose(adjit.grad(loss, backend="numpy")(_M), numgrad(loss, _M),
                               rtol=2e-6, atol=1e-9)


def test_gradient_in_the_data_and_the_numba_backend():
    loss = lambda x: np.sum(st.gamma.logpdf(x, 2.5, scale=1.5) + st.logistic.logcdf(x, 0.5))
    np.testing.assert_allclose(adjit.grad(loss, backend="numba")(_Y), numgrad(loss, _Y),
                               rtol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")    # SciPy's own, dividing by scale 0
def test_scipy_conventions_off_the_support_and_at_invalid_parameters():
    x = np.array([-1.0, 0.0, 0.5, 2.0, np.nan])

    def f(s):
        return (st.gamma.logpdf(x, 2.0, scale=s[0]), st.gamma.pdf(x, 2.0, scale=s[1]),
                st.expon.cdf(x, scale=s[0]), st.expon.sf(x, scale=s[1]),
                st.uniform.logcdf(x, 0.0, s[0]), st.beta.logpdf(x, s[0], 2.0),
                st.poisson.logpmf(np.array([-1, 0, 1.5, 2, 3]), s[0]),
                st.expon.ppf(np.array([0.0, 0.5, 1.0, 1.5, -0.1]), scale=s[0]))
    for s in (np.array([1.5, 0.5]), np.array([-1.0, 0.0])):
        for got, want in zip(adjit.compile(f, backend="numpy")(s), f(s)):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_off_support_values_do_not_reach_the_gradient():
    # gamma's formula at x <= 0 is NaN or inf; those points give -inf and no gradient
    loss = lambda p: np.sum(np.maximum(st.gamma.logpdf(np.array([-1.0, 0.0, 1.0, 2.0]),
                                                       np.exp(p[0])), -50.0))
    p = np.array([0.4])
    g = adjit.grad(loss)(p)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, numgrad(loss, p), rtol=1e-6)


def test_formulas_adjit_cannot_trace_are_refused_by_name():
    with pytest.raises(adjit.UnsupportedError, match=r"scipy\.stats\.gamma\.cdf.*gammainc"):
        adjit.grad(lambda a: np.sum(st.gamma.cdf(_Y, a[0])))(np.array([1.5]))
    with pytest.raises(adjit.UnsupportedError, match=r"scipy\.stats\.vonmises\.cdf"):
        adjit.grad(lambda a: np.sum(st.vonmises.cdf(_Y, a[0])))(np.array([1.5]))


def test_a_method_bound_before_tracing_is_named():
    logpdf = st.gamma.logpdf
    with pytest.raises(adjit.AdjitError, match=r"scipy\.stats\.gamma\.logpdf\(\.\.\.\) inside"):
        adjit.grad(lambda a: np.sum(logpdf(_Y, a[0])))(np.array([1.5]))


def test_scipy_is_its_own_again_after_tracing():
    from scipy.stats import _distn_infrastructure as di
    adjit.grad(lambda a: np.sum(st.gamma.logpdf(_Y, a[0])))(np.array([1.5]))
    assert di.rv_continuous.logpdf.__module__ == di.__name__
    assert "__call__" not in type(st.multivariate_normal).__dict__ or \
        type(st.multivariate_normal).__call__.__module__.startswith("scipy")
    np.testing.assert_allclose(st.gamma.logpdf(_Y, 1.5), st.gamma(1.5).logpdf(_Y))


def _every_distribution():
    from scipy.stats._distr_params import distcont, distdiscrete
    for family, kind in ((distcont, "logpdf"), (distdiscrete, "logpmf")):
        for name, shapes in family:
            if isinstance(name, str) and not any(np.ndim(s) for s in shapes):
                yield name, kind, np.array(shapes, float)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_distribution_of_scipys_list_matches_scipy_or_is_refused():
    """SciPy's own list of distributions with test parameters: the log density at three
    quantiles with traced parameters equals SciPy's, with central-difference gradients away
    from the kinks, or the formula is refused by name (never a crash or another number)."""
    done, refused = set(), set()
    for name, kind, shapes in _every_distribution():
        dist = getattr(st, name)
        x = dist.ppf(np.array([0.2, 0.6, 0.9]), *shapes)
        loss = lambda p: np.sum(getattr(dist, kind)(x, *p))
        try:
            got = adjit.compile(loss, backend="numpy")(shapes)
            g = adjit.grad(loss, backend="numpy")(shapes)
        except adjit.AdjitError as e:
            assert f"scipy.stats.{name}.{kind}" in str(e)
            refused.add(name)
            continue
        np.testing.assert_allclose(got, loss(shapes), rtol=1e-9, err_msg=name)
        if kind == "logpdf" and np.all(shapes != np.round(shapes)):
            np.testing.assert_allclose(g, numgrad(loss, shapes), rtol=1e-4, atol=1e-6,
                                       err_msg=name)
        done.add(name)
    assert len(done - refused) >= 104, sorted(refused)      # 108 of 130 with SciPy 1.17


def test_the_first_argument_by_scipys_own_keyword():
    for f in (lambda s: s * st.expon.ppf(q=0.3), lambda s: st.expon.ppf(q=0.3, scale=s),
              lambda s: st.poisson.pmf(k=3, mu=s), lambda s: st.norm.ppf(q=0.2, loc=s),
              lambda s: st.norm.cdf(x=s, scale=2.0), lambda s: st.gamma.logpdf(x=s, a=2.0)):
        np.testing.assert_allclose(adjit.compile(f, backend="numpy")(2.0), f(2.0), rtol=1e-13)
        np.testing.assert_allclose(adjit.grad(f)(2.0), numgrad(f, np.array(2.0)), rtol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_distribution_functions_at_infinities_and_the_ends_of_the_support():
    cases = [lambda p: st.mielke.cdf(np.array([np.inf, 1.0, 0.0]), 2 + p[0], 3.0),
             lambda p: st.exponnorm.cdf(np.array([-np.inf, 0.3]), 1.5 + p[0]),
             lambda p: st.recipinvgauss.sf(np.array([np.inf, 0.5]), 0.6 + p[0]),
             lambda p: st.anglit.logsf(np.array([np.pi / 4, 0.1]) + p[0]),
             lambda p: st.expon.logcdf(np.array([0.0, np.inf, -1.0]) + p[0]),
             lambda p: st.yulesimon.cdf(np.array([np.inf, 3.0]), 11 + p[0]),
             lambda p: st.geom.sf(np.array([-1.0, 0, 2.5, np.inf]), 0.3 + p[0]),
             lambda p: st.t.logpdf(np.array([0.5, 1.0]), np.array([np.inf, 3.0]) + p[0]),
             lambda p: st.t.pdf(np.array([0.5]), np.inf + p[0])]
    p = np.array([0.0])
    for f in cases:
        np.testing.assert_allclose(adjit.compile(f, backend="numpy")(p), f(p), rtol=1e-12)


def test_multivariate_normal_and_dirichlet_follow_scipy():
    S = np.array([[1.0, 1.0], [1.0, 1.0]])
    X = np.array([[0.1, 0.1], [0.1, 0.3]])
    sing = lambda m: st.multivariate_normal.logpdf(X, m, S, allow_singular=True)
    np.testing.assert_allclose(adjit.compile(sing, backend="numpy")(np.zeros(2)),
                               sing(np.zeros(2)), rtol=1e-13)        # -inf off the support
    diag = lambda x: st.multivariate_normal.logpdf(x, np.zeros(2),
                                                   st.Covariance.from_diagonal([1.0, 2.0]))
    x = np.array([0.3, 0.1])
    np.testing.assert_allclose(adjit.compile(diag, backend="numpy")(x), diag(x), rtol=1e-13)
    np.testing.assert_allclose(adjit.grad(diag)(x), [-0.3, -0.05], rtol=1e-13)
    a = np.array([1.5, 2.0, 3.0])
    short = lambda a: st.dirichlet.logpdf(np.array([0.2, 0.3]), a)   # the last is 1 - sum
    np.testing.assert_allclose(adjit.compile(short, backend="numpy")(a), short(a), rtol=1e-13)
    with pytest.raises(ValueError, match="simplex"):
        adjit.compile(lambda a: st.dirichlet.logpdf(np.array([0.2, 0.2, 0.2]), a))(a)
    assert np.isnan(adjit.compile(lambda a: st.dirichlet.logpdf(np.array([0.2, 0.3, 0.5]),
                                                                a - 2.0))(a))
    with pytest.raises(adjit.UnsupportedError, match=r"multivariate_normal\(\.\.\.\)\.cdf"):
        adjit.grad(lambda m: st.multivariate_normal(m, np.eye(2)).cdf(np.zeros(2)))(np.zeros(2))
    with pytest.raises(adjit.UnsupportedError, match="allow_singular"):
        adjit.grad(lambda s: st.multivariate_normal.logpdf(X, np.zeros(2), s * S,
                                                           allow_singular=True).sum())(1.0)


def test_student_t_at_large_degrees_of_freedom_keeps_its_digits():
    x = np.array([0.5, 2.0])
    f = lambda p: st.t.logpdf(x, p[1], loc=p[0]).sum()
    for df, d_df in ((3.0, 0.029845555834785174), (1e5, -8.793334592845345e-11),
                     (1e8, -8.79424908455247e-17)):      # d/d df by mpmath (40 digits)
        p = np.array([0.1, df])
        np.testing.assert_allclose(adjit.compile(f, backend="numpy")(p), f(p), rtol=1e-14)
        np.testing.assert_allclose(adjit.grad(f)(p)[1], d_df, rtol=1e-6)
    p = np.array([0.1, 1e15])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(p), f(p), rtol=1e-14)


def test_multinomial_with_traced_probabilities():
    X = np.array([[2, 3, 5], [0, 10, 0], [1, 2, 7], [1, 2, 6]])      # the last sums to 9
    def f(th):
        p = np.exp(th) / np.sum(np.exp(th))
        return st.multinomial.logpmf(X, 10, p)
    th = np.array([0.1, -0.3, 0.5])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(th), f(th), rtol=1e-13)
    loss = lambda th: np.sum(f(th)[:3])
    np.testing.assert_allclose(adjit.grad(loss)(th), numgrad(loss, th), rtol=1e-6)
    frozen = lambda th: st.multinomial(10, np.exp(th) / np.sum(np.exp(th))).pmf(X[0])
    np.testing.assert_allclose(adjit.compile(frozen, backend="numpy")(th), frozen(th),
                               rtol=1e-13)


@pytest.mark.parametrize("f", [
    lambda p: st.norm(p[0], np.exp(p[1])).entropy(),
    lambda p: st.gamma(np.exp(p[0]), scale=np.exp(p[1])).entropy(),
    lambda p: st.beta(np.exp(p[0]), np.exp(p[1])).entropy(),       # SciPy's _lazyselect
    lambda p: st.beta.entropy(np.exp(p[0]) * 1e7, np.exp(p[1]) * 1e7),
    lambda p: st.lognorm.entropy(np.exp(p[0]), scale=np.exp(p[1])),
    lambda p: st.gamma(np.exp(p[0]), scale=np.exp(p[1])).mean(),
    lambda p: st.gamma.var(np.exp(p[0]), scale=np.exp(p[1])),
    lambda p: st.beta(np.exp(p[0]), np.exp(p[1])).std(),
    lambda p: st.t(np.exp(p[0]) + 2, p[1]).var(),
    lambda p: st.poisson(np.exp(p[0])).mean()])
def test_entropy_and_moments_of_distributions_with_traced_parameters(f):
    p = np.array([0.7, 0.4])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(p), f(p), rtol=1e-12)
    np.testing.assert_allclose(adjit.grad(f)(p), numgrad(f, p), rtol=1e-6, atol=1e-9)


def test_summaries_at_invalid_parameters_and_refusals():
    assert np.isnan(adjit.compile(lambda s: st.norm.entropy(scale=s))(-1.0))
    with pytest.raises(adjit.UnsupportedError, match=r"scipy\.stats\.t\.entropy"):
        adjit.grad(lambda df: st.t(df).entropy())(3.0)


def test_truncated_normal_with_traced_bounds():
    """A positive-truncated normal prior (a = -mu / sigma): SciPy's truncnorm selects its
    cases with masks of a and b; adjit's formulas select with np.where."""
    x = np.array([0.3, 1.5, 2.0])

    def f(th):
        mu, s = th[0], np.exp(th[1])
        return st.truncnorm.logpdf(x, (0 - mu) / s, np.inf, loc=mu, scale=s).sum()
    th = np.array([0.5, 0.2])
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(th), f(th), rtol=1e-13)
    np.testing.assert_allclose(adjit.grad(f)(th), numgrad(f, th), rtol=1e-6)
    xs = np.array([-3.0, -1.0, 0.5, 2.0, 8.5, 9.5, 12.0])
    for kind in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
        g = lambda p: getattr(st.truncnorm, kind)(xs, p[0], p[1])
        for p in (np.array([-2.0, 1.5]), np.array([5.0, 9.0]), np.array([-12.0, -6.0])):
            np.testing.assert_allclose(adjit.compile(g, backend="numpy")(p), g(p), rtol=1e-10)


def test_multivariate_normal_with_a_cholesky_covariance_and_multinomial_edges():
    C = np.array([[2.0, 0.3], [0.3, 1.0]])
    X = np.array([[0.1, 0.2], [1.0, -1.0]])
    cov = st.Covariance.from_cholesky(np.linalg.cholesky(C))
    f = lambda m: st.multivariate_normal.logpdf(X, m, cov)
    np.testing.assert_allclose(adjit.compile(f, backend="numpy")(np.zeros(2)), f(np.zeros(2)),
                               rtol=1e-13)
    g = lambda p: st.multinomial.logpmf(np.array([1, 2, 3]), 6.5, p)    # n truncated to 6
    for p in (np.array([0.2, 0.3, 0.5]), np.array([0.2, 0.3, 0.5 + 3e-7], np.float32)):
        np.testing.assert_allclose(adjit.compile(g, backend="numpy")(p), g(p), rtol=1e-13)


def test_summaries_broadcast_loc_and_take_scipys_moments_keyword():
    locs = np.array([0.0, 1.0, np.nan])
    for f in (lambda s: st.norm.var(loc=locs, scale=s), lambda s: st.laplace(loc=locs, scale=s).std(),
              lambda s: st.expon.entropy(loc=locs, scale=s), lambda p: st.binom.mean(10, p / 4),
              lambda m: st.truncnorm.var(-1.0, 2.0, loc=m), lambda a: st.invgamma.std(a + 1.5)):
        np.testing.assert_allclose(adjit.compile(f, backend="numpy")(2.0), f(2.0), rtol=1e-13)


def test_frozen_multivariate_normal_at_traced_points():
    L = np.array([[1.0, 0.0], [0.5, 2.0]])
    mu, X = np.array([0.1, -0.2]), np.array([[0.3, 1.0], [-1.0, 2.0]])
    for cov in (st.Covariance.from_cholesky(L), L @ L.T, st.Covariance.from_diagonal([1.0, 2.0])):
        for f in (lambda X: st.multivariate_normal(mu, cov).logpdf(X),
                  lambda X: st.multivariate_normal(mu, cov).pdf(X)):
            np.testing.assert_allclose(adjit.compile(f, backend="numpy")(X), f(X), rtol=1e-13)
