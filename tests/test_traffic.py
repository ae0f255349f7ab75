"""Traffic as people have it: length distributions and arrival processes, drawn with a seed."""

from __future__ import annotations

import numpy as np
import pytest

from shardplan.contracts.traffic import Traffic, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.traffic.stream import request_stream


def _workload(**traffic: object) -> Workload:
    return Workload(isl=2048, osl=256, rate=8.0, traffic=Traffic.model_validate(traffic))


def test_lengths_follow_their_distribution_and_a_seed_repeats_them() -> None:
    w = _workload(isl=parse_length("lognormal:mean=2048,cv=0.8"), osl=parse_length("uniform:100,300"))
    stream = request_stream(w, requests=20_000, seed=7)
    assert abs(stream.mean_isl / 2048 - 1) < 0.03 and abs(stream.isl.std() / stream.isl.mean() - 0.8) < 0.05
    assert stream.osl.min() >= 100 and stream.osl.max() <= 300 and abs(stream.mean_osl / 200 - 1) < 0.02
    again = request_stream(w, requests=20_000, seed=7)
    assert np.array_equal(stream.isl, again.isl) and np.array_equal(stream.arrival_s, again.arrival_s)
    other = request_stream(w, requests=20_000, seed=8)
    assert not np.array_equal(stream.isl, other.isl)


def test_arrivals_keep_the_rate_and_bursts_spread_the_gaps() -> None:
    poisson = request_stream(_workload(), requests=20_000, seed=1)
    bursty = request_stream(_workload(arrival=parse_arrival("gamma:cv=3")), requests=20_000, seed=1)
    for stream in (poisson, bursty):
        assert np.all(np.diff(stream.arrival_s) >= 0) and stream.arrival_s[0] == 0
        assert abs(len(stream) / stream.arrival_s[-1] / 8.0 - 1) < 0.1
    cv = lambda s: np.diff(s.arrival_s).std() / np.diff(s.arrival_s).mean()  # noqa: E731
    assert abs(cv(poisson) - 1) < 0.05 and abs(cv(bursty) - 3) < 0.3
    assert np.array_equal(poisson.isl, np.full(20_000, 2048)) and poisson.clients is None


def test_a_closed_loop_needs_no_rate_and_an_open_one_does() -> None:
    closed = request_stream(Workload(isl=512, osl=64, traffic=Traffic(arrival=parse_arrival("closed:16"))),
                            requests=100)
    assert closed.clients == 16 and not closed.arrival_s.any()
    with pytest.raises(InputError, match="rate") as caught:
        request_stream(Workload(isl=512, osl=64), requests=10)
    assert caught.value.field == "rate"


@pytest.mark.parametrize(("text", "parse", "field"), [
    ("lognormal:mean=abc", parse_length, "isl_dist"), ("weibull:2", parse_length, "isl_dist"),
    ("uniform:500,100", parse_length, "isl_dist"), ("gamma:cv=-1", parse_arrival, "arrival"),
    ("closed:0", parse_arrival, "arrival"), ("burst", parse_arrival, "arrival"),
    ("lognormal:mean=inf,cv=1", parse_length, "isl_dist"),
])
def test_malformed_traffic_is_one_error_naming_the_field(text: str, parse: object, field: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(text)  # type: ignore[operator]
    assert caught.value.field == field and caught.value.fix and "\n" not in str(caught.value)
