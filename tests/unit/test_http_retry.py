"""The shared HTTP retry policy, driven by scripted responses and a recording `sleep` (no server, no waiting)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from raypipe.http_retry import NoResponse, RetryPolicy, backoff_delay, is_retryable_status, parse_retry_after

NOW = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 599])
def test_rate_limits_timeouts_and_server_errors_are_retryable(status):
    assert is_retryable_status(status)


@pytest.mark.parametrize("status", [200, 204, 301, 400, 401, 403, 404, 422])
def test_success_redirects_and_client_errors_are_final(status):
    assert not is_retryable_status(status)


@pytest.mark.parametrize(("value", "seconds"), [
    ("1.5", 1.5), ("120", 120.0), (" 3 ", 3.0),
    ("Wed, 21 Oct 2015 07:29:30 GMT", 90.0),  # an HTTP date: the time left until then
    ("Wed, 21 Oct 2015 07:28:45 -0000", 45.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # already past
    (None, 0.0), ("", 0.0), ("soon", 0.0), ("-5", 0.0), ("inf", 0.0), ("nan", 0.0),
])
def test_retry_after_header_values(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


def test_backoff_doubles_from_the_first_step():
    assert [backoff_delay(a, 0.5) for a in range(4)] == [0.5, 1.0, 2.0, 4.0]


def test_a_longer_retry_after_wins_and_a_shorter_one_does_not():
    assert backoff_delay(1, 0.5, retry_after=3.0) == 3.0
    assert backoff_delay(2, 0.5, retry_after=1.0) == 2.0


def test_jitter_scales_the_step_into_its_upper_half_but_not_below_retry_after():
    assert backoff_delay(2, 1.0, jitter=0.0) == 2.0
    assert backoff_delay(2, 1.0, jitter=0.5) == 3.0
    assert backoff_delay(2, 1.0, retry_after=2.5, jitter=0.0) == 2.5


def _script(*outcomes: httpx.Response | Exception) -> tuple[Callable[[], httpx.Response], list[int]]:
    """A request function replaying `outcomes` in order, and the list of attempts it has served."""
    calls: list[int] = []

    def request() -> httpx.Response:
        calls.append(len(calls))
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return request, calls


def test_retries_until_a_final_response_following_the_schedule():
    request, calls = _script(httpx.Response(503), httpx.Response(429, headers={"Retry-After": "1.5"}),
                             httpx.ReadTimeout("stalled"), httpx.ConnectError("refused"), httpx.Response(200))
    sleeps: list[float] = []
    response = RetryPolicy(retries=4, backoff_s=0.1, sleep=sleeps.append).send(request, what="test")
    assert response.status_code == 200 and len(calls) == 5
    assert sleeps == [0.1, 1.5, 0.4, 0.8]


def test_a_final_error_status_is_returned_without_retrying():
    request, calls = _script(httpx.Response(404, text="no such model"))
    sleeps: list[float] = []
    response = RetryPolicy(retries=3, backoff_s=0.1, sleep=sleeps.append).send(request, what="test")
    assert response.status_code == 404 and len(calls) == 1 and sleeps == []


def test_running_out_of_retries_reports_the_last_problem_and_the_attempts():
    request, calls = _script(httpx.Response(500), httpx.Response(502, text="bad gateway"),
                             httpx.Response(503, text="overloaded"))
    sleeps: list[float] = []
    with pytest.raises(NoResponse) as err:
        RetryPolicy(retries=2, backoff_s=1.0, sleep=sleeps.append).send(request, what="test")
    assert (err.value.attempts, err.value.problem) == (3, "HTTP 503: overloaded")
    assert sleeps == [1.0, 2.0] and len(calls) == 3


def test_a_transport_error_that_cannot_improve_is_not_retried():
    cause = httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' protocol.")
    request, calls = _script(cause)
    sleeps: list[float] = []
    with pytest.raises(NoResponse) as err:
        RetryPolicy(retries=3, backoff_s=0.1, sleep=sleeps.append).send(request, what="test")
    assert err.value.attempts == 1 and err.value.problem.startswith("UnsupportedProtocol:")
    assert err.value.__cause__ is cause and sleeps == [] and len(calls) == 1


def test_the_jitter_source_is_drawn_once_per_retry():
    draws = iter([0.0, 0.5])
    request, _ = _script(httpx.Response(500), httpx.Response(500), httpx.Response(200))
    sleeps: list[float] = []
    policy = RetryPolicy(retries=2, backoff_s=1.0, jitter=lambda: next(draws), sleep=sleeps.append)
    assert policy.send(request, what="test").status_code == 200
    assert sleeps == [0.5, 1.5]
