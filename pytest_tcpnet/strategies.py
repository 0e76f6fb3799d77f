"""Hypothesis strategies for paths, buffers and hosts, and settings for sweeps that measure (the only hypothesis importer).

Every argument is keyword-only and takes a (min, max) range, a fixed value or a strategy; an
impairment left out is absent, so ``links(rate=(10e6, 80e6))`` runs without netem. Ranges
are sampled log-uniformly and shrink toward their minimum: a failing sweep reports the
simplest path (shortest RTT, slowest rate, least loss) that still fails. Build a fresh pair
per example inside the test (function-scoped fixtures are not reset between examples)::

    @settings(parent=strategies.sweep)
    @given(link=strategies.links(rtt=("5ms", "200ms")), rcvbuf=strategies.buffer_sizes("4kb", "256kb"))
    def test_window_law(tcpnet, link, rcvbuf):
        with tcpnet.pair(link=link) as pair:
            result = pair.transfer(...)
"""

import hashlib

from hypothesis import HealthCheck, is_hypothesis_test, settings
from hypothesis import seed as _seed
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .model import KNOWN_CONGESTION_CONTROLS, Host, Link, parse_fraction, parse_rate, parse_size, parse_time

__all__ = [
    "links",
    "buffer_sizes",
    "hosts",
    "sweep",
    "sweep_ci",
    "SWEEP_PROFILE",
    "SWEEP_CI_PROFILE",
    "shard_seed",
    "seed_for_shard",
]

#: Settings for sweeps whose examples each build a lab path and move data: no deadline (a
#: transfer takes what it takes), health checks that assume fast examples off, few examples.
SWEEP_PROFILE = "tcpnet-sweep"
#: The CI variant: fewer examples, derandomized so every CI run tries the same conditions.
SWEEP_CI_PROFILE = "tcpnet-sweep-ci"

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
settings.register_profile(SWEEP_PROFILE, deadline=None, max_examples=8, suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile(
    SWEEP_CI_PROFILE,
    deadline=None,
    max_examples=5,
    suppress_health_check=_SLOW_OK,
    derandomize=True,
    database=None,
    print_blob=True,
)
sweep = settings.get_profile(SWEEP_PROFILE)
sweep_ci = settings.get_profile(SWEEP_CI_PROFILE)

_STEPS = 1000  # resolution of a log-uniform range


def _log_range(field, low, high, parse, *, round_to=None):
    """A strategy over [low, high] (parsed), log-uniform, shrinking toward low."""
    lo, hi = parse(low, field), parse(high, field)
    if not (lo > 0 and hi >= lo):
        raise ValueError(f"{field}: a range must be (min, max) with 0 < min <= max, got ({low!r}, {high!r})")

    def point(step):
        value = lo * (hi / lo) ** (step / _STEPS)
        return min(hi, max(lo, round(value / round_to) * round_to if round_to else value))

    return st.integers(0, _STEPS).map(point)


def _linear_range(field, low, high, parse):
    lo, hi = parse(low, field), parse(high, field)
    if not hi >= lo:
        raise ValueError(f"{field}: a range must be (min, max) with min <= max, got ({low!r}, {high!r})")
    return st.integers(0, _STEPS).map(lambda step: lo + (hi - lo) * step / _STEPS)


def _argument(field, value, parse, *, log=True, round_to=None):
    """A strategy for one argument: None stays None, a strategy is used as is, (min, max) a range, else a fixed value."""
    if value is None:
        return st.none()
    if isinstance(value, SearchStrategy):
        return value
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{field}: a range must be a (min, max) pair, got {value!r}")
        if log and parse(value[0], field) > 0:
            return _log_range(field, value[0], value[1], parse, round_to=round_to)
        return _linear_range(field, value[0], value[1], parse)
    parse(value, field)
    return st.just(value)


def links(*, rtt=None, rate=None, loss=None, jitter=None, limit=None):
    """Strategy of Link values: each argument a (min, max) range, a fixed value, a strategy, or None (absent).

    Units as Link takes them ("20ms", "100mbit", "1%", or SI numbers). Checked at once: a
    range whose ends Link would refuse fails here, before any example runs.
    """
    parts = {
        "rtt": _argument("rtt", rtt, parse_time, round_to=1e-4),
        "rate": _argument("rate", rate, parse_rate, round_to=1e3),
        "loss": _argument("loss", loss, parse_fraction, log=False),
        "jitter": _argument("jitter", jitter, parse_time, log=False),
        "limit": _argument("limit", limit, lambda v, f: v if isinstance(v, int) else parse_size(v, f), log=False),
    }
    for name, value in (("rtt", rtt), ("rate", rate), ("loss", loss), ("jitter", jitter), ("limit", limit)):
        if value is not None and not isinstance(value, SearchStrategy):
            for end in value if isinstance(value, (tuple, list)) else (value,):
                Link(**{name: end, **({"rtt": "1s"} if name == "jitter" else {})})
    if limit is not None and isinstance(limit, (tuple, list)):
        parts["limit"] = parts["limit"].map(lambda v: max(1, int(v)))

    def build(values):
        return Link(**{k: v for k, v in values.items() if v is not None})

    return st.fixed_dictionaries(parts).map(build)


def buffer_sizes(min_size="4kb", max_size="256kb"):
    """Strategy of socket buffer requests in bytes (ints), log-uniform over [min_size, max_size], shrinking to min."""
    lo, hi = parse_size(min_size, "min_size"), parse_size(max_size, "max_size")
    if not (1 <= lo <= hi <= 2**31 - 1):
        raise ValueError(
            f"buffer_sizes: need 1 <= min_size <= max_size <= 2^31-1 bytes, got {min_size!r}, {max_size!r}"
        )
    return _log_range("buffer_sizes", lo, hi, parse_size, round_to=1).map(int)


def hosts(*, cc=None, rmem=None, wmem=None, sysctls=None):
    """Strategy of Host values: cc a name, a list of names or a strategy; rmem/wmem a buffer range or size.

    rmem/wmem set tcp_rmem/tcp_wmem to the same value three times (autotuning pinned), as
    the claims about small buffers do; sysctls are fixed extra settings.
    """
    if isinstance(cc, (list, tuple)):
        unknown = [c for c in cc if c not in KNOWN_CONGESTION_CONTROLS]
        if unknown or not cc:
            raise ValueError(f"cc: unknown congestion control(s) {unknown}; known: {sorted(KNOWN_CONGESTION_CONTROLS)}")
        cc_strategy = st.sampled_from(list(cc))
    elif cc is None or isinstance(cc, SearchStrategy):
        cc_strategy = cc or st.none()
    else:
        Host(cc=cc)
        cc_strategy = st.just(cc)

    def sizes(field, value):
        if value is None or isinstance(value, SearchStrategy):
            return value or st.none()
        if isinstance(value, (tuple, list)):
            return buffer_sizes(*value)
        return st.just(int(parse_size(value, field)))

    Host(sysctls=sysctls or {})

    def build(values):
        extra = dict(sysctls or {})
        for key, size in (("net.ipv4.tcp_rmem", values["rmem"]), ("net.ipv4.tcp_wmem", values["wmem"])):
            if size is not None:
                extra[key] = (size, size, size)
        return Host(sysctls=extra, cc=values["cc"])

    return st.fixed_dictionaries({"cc": cc_strategy, "rmem": sizes("rmem", rmem), "wmem": sizes("wmem", wmem)}).map(
        build
    )


def shard_seed(test_name, *, splits, group, base=0):
    """The seed of one hypothesis test in shard `group` of `splits`: the same on every run (and every kernel) of
    that shard, different in another shard or with another base (--hypothesis-seed)."""
    digest = hashlib.sha256(f"{base}:{group}/{splits}:{test_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def seed_for_shard(function, *, splits, group, base=0):
    """Seed a @given test for its shard (shard_seed), unless it has a seed of its own (@seed); True if seeded.

    A seed overrides the profile's derandomize: a sweep split over shards tries other examples in each shard, not
    the same few everywhere.
    """
    if not is_hypothesis_test(function) or getattr(function, "_hypothesis_internal_use_seed", None) is not None:
        return False  # hypothesis keeps a test's own @seed there (no public reader)
    name = f"{function.__module__}.{function.__qualname__}"
    _seed(shard_seed(name, splits=splits, group=group, base=base))(function)
    return True
