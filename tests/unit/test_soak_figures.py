"""The soak's figures (benchmarks/_soak_figures.py) on made-up records: which failures count against
a kill, when recovery and replacement happened, p99 before and after, memory growth per replica
process, and the per-minute rows; and their plot (benchmarks/_soak_plot.py)."""

from __future__ import annotations

import pytest

from benchmarks._soak_figures import (
    Kill,
    Replica,
    Sample,
    drained_at,
    first_answer_at,
    in_flight,
    kill_figures,
    memory_growth,
    minute_rows,
    outside_in_flight,
    percentile_ms,
    replaced_s,
    summary,
)
from benchmarks._soak_load import Request

MIB = 2**20


def ok(start: float, latency: float) -> Request:
    return Request(start, start + latency, 200)


def failed(start: float, end: float, error: str = "HTTP 500") -> Request:
    return Request(start, end, 500 if error.startswith("HTTP") else None, error)


def replicas(t: float, generators: list[tuple[int, int]], rss_mib: float = 100.0) -> Sample:
    """A sample with the Generator replicas (pid, node) given and one Decoder (pid 9, node 0)."""
    return Sample(t, (Replica("Decoder", 9, 0, int(50 * MIB)),
                      *(Replica("Generator", pid, node, int(rss_mib * MIB)) for pid, node in generators)))


REPLICA_KILL = Kill("replica", 30.0, 1, 1, 2, "the Generator replica's process")
NODE_KILL = Kill("node", 60.0, 3, 2, 2, "worker node 2 (every process)")


def test_in_flight_is_sent_before_the_kill_and_answered_after_it():
    requests = [ok(28.0, 1.0), ok(29.0, 2.0), failed(29.5, 31.0), ok(30.5, 0.2)]
    assert in_flight(requests, 30.0) == requests[1:3]


def test_a_failure_counts_against_a_kill_only_when_it_was_in_flight_at_one():
    requests = [failed(29.0, 31.0), failed(59.0, 61.0, "ReadTimeout"), failed(35.0, 35.5, "HTTP 503"),
                failed(5.0, 6.0), ok(40.0, 1.0)]
    assert outside_in_flight(requests, [REPLICA_KILL, NODE_KILL]) == [requests[2], requests[3]]


def test_the_first_answer_is_to_a_request_sent_after_the_kill():
    # the request sent before the kill and answered after it is no sign that service goes on
    requests = [ok(29.0, 1.5), failed(30.2, 30.4), ok(30.5, 3.0), ok(31.0, 1.0)]
    assert first_answer_at(requests, 30.0) == 32.0
    assert first_answer_at([ok(29.0, 5.0)], 30.0) is None


def test_the_queue_is_drained_when_every_request_sent_before_a_time_has_ended():
    requests = [ok(29.0, 1.5), failed(30.2, 34.0), ok(31.5, 5.0), ok(33.0, 9.0)]
    assert drained_at(requests, 32.0) == 36.5  # the one sent at 33 is not the outage's backlog
    assert drained_at(requests, None) is None
    assert drained_at([], 40.0) == 40.0


def test_a_replica_still_in_its_constructor_does_not_count_as_a_replacement():
    def generators(t: float, ready: bool) -> Sample:
        return Sample(t, (Replica("Generator", 2, 0, MIB), Replica("Generator", 5, 1, MIB, ready)))

    samples = [generators(32.0, False), generators(36.0, True)]
    assert replaced_s(samples, REPLICA_KILL, "Generator", 2) == 6.0


def test_percentiles_in_ms_and_none_of_nothing():
    assert percentile_ms([], 99) is None
    assert percentile_ms([0.25], 99) == 250.0
    assert percentile_ms([i / 100 for i in range(1, 101)], 50) == pytest.approx(505.0)
    assert percentile_ms([i / 100 for i in range(1, 101)], 99) == pytest.approx(990.1)


def test_a_replica_is_replaced_when_its_number_is_back_without_the_victim():
    samples = [replicas(29.0, [(1, 1), (2, 0)]), replicas(31.0, [(2, 0)]), replicas(33.0, [(1, 1), (2, 0)]),
               replicas(35.0, [(2, 0), (5, 1)])]
    # the victim's pid still listed (the sample before the kill, or a process not yet reaped) is no replacement
    assert replaced_s(samples, REPLICA_KILL, "Generator", 2) == 5.0
    assert replaced_s(samples[:3], REPLICA_KILL, "Generator", 2) is None


def test_after_a_node_kill_the_replacement_must_be_on_another_node():
    samples = [replicas(61.0, [(2, 0), (6, 2)]), replicas(64.0, [(2, 0), (7, 1)])]
    assert replaced_s(samples, NODE_KILL, "Generator", 2) == 4.0


def test_kill_figures_compare_p99_in_the_minute_before_and_the_minute_after_recovery():
    minute = 10.0
    before = [ok(20.0 + i, 0.1) for i in range(10)]          # sent in [20, 30): 100 ms each
    flying = [ok(29.5, 1.0), failed(29.8, 30.5)]              # in flight at 30
    after = [ok(31.0 + i, 0.3) for i in range(12)]            # first answer at 31.3, then 300 ms each
    late = [failed(45.0, 45.2, "HTTP 503")]                   # outside any in-flight set
    requests = before + flying + after + late
    samples = [replicas(29.0, [(1, 1), (2, 0)]), replicas(33.0, [(2, 0), (4, 1)])]
    rec = kill_figures(requests, samples, [REPLICA_KILL], 0, 0.0, minute, "Generator", 2)
    assert (rec["in_flight"], rec["failed_in_flight"], rec["errors_outside_inflight"]) == (2, 1, 1)
    # service went on at 31.3; the replacement ran at 33; what was sent before it was answered by 32.3
    assert rec["first_answer_s"] == pytest.approx(1.3) and rec["replaced_s"] == 3.0
    assert rec["recovery_s"] == pytest.approx(2.3)
    # the minute before is the requests answered before the kill: the in-flight answer is not its figure
    assert rec["p99_before_ms"] == pytest.approx(100.0, abs=0.2)
    assert rec["p99_after_ms"] == pytest.approx(300.0, abs=0.2)
    assert rec["p99_after_over_before"] == pytest.approx(3.0, abs=0.01)
    assert rec["answered_after_recovery"] == 10  # sent at 33 ... 42
    assert rec["replica_nodes_after"] == [0, 1]


def test_memory_growth_is_per_replica_process_alive_in_the_first_and_the_last_minute():
    minute = 10.0
    samples = [replicas(1.0, [(1, 1), (2, 0)], 100.0), replicas(5.0, [(1, 1), (2, 0)], 100.0),
               # minute 2 (the last): pid 2 grew 10%, pid 1 was replaced by a small new pid 5
               replicas(21.0, [(5, 1), (2, 0)], 110.0), replicas(25.0, [(5, 1), (2, 0)], 110.0)]
    growth = memory_growth(samples, 0.0, minute, 3)
    assert growth == {"Decoder": 0.0, "Generator": pytest.approx(0.1)}
    # with no Generator process living through, its growth is unknown rather than a mean over newcomers
    assert memory_growth(samples[:2] + [replicas(21.0, [(5, 1), (6, 0)])], 0.0, minute, 3)["Generator"] is None


def test_minute_rows_count_answers_latency_errors_memory_and_replicas_per_minute():
    requests = [ok(1.0, 0.5), ok(2.0, 1.5), failed(3.0, 3.1, "HTTP 503"), ok(9.5, 1.0), ok(12.0, 0.2)]
    samples = [replicas(1.0, [(1, 1), (2, 0)], 100.0), replicas(6.0, [(1, 1)], 120.0),
               replicas(11.0, [(1, 1), (3, 0)], 80.0)]
    first, second = minute_rows(requests, samples, 0.0, 10.0, 2)
    # the request sent at 9.5 counts as sent in minute 0 and answered in minute 1
    assert (first["sent"], first["rps"], first["errors"]) == (4, 0.2, {"HTTP 503": 1})
    assert first["p50_ms"] == 1000.0 and first["p99_ms"] == pytest.approx(1490.0)
    # per replica process over the minute's samples (pid 1: 110, pid 2: 100), then over the replicas
    assert first["replica_rss_mib"] == {"Decoder": 50.0, "Generator": 105.0}
    assert first["replicas"]["Generator"] == {"min": 1, "max": 2}
    assert (second["sent"], second["rps"], second["errors"]) == (1, 0.2, {})
    assert second["replicas"]["Generator"] == {"min": 2, "max": 2}


def test_summary_has_the_issues_keys_and_the_worst_ratio():
    requests = [ok(20.0 + i, 0.1) for i in range(10)] + [ok(31.0 + i, 0.11) for i in range(28)] \
        + [ok(61.0 + i, 0.1) for i in range(24)]
    samples = [replicas(5.0, [(1, 1), (3, 2)]), replicas(40.0, [(3, 2), (4, 1)]), replicas(75.0, [(4, 1), (8, 0)])]
    out = summary(requests, samples, [REPLICA_KILL, NODE_KILL], 0.0, 10.0, 8, "Generator", 2)
    assert out["errors_outside_inflight"] == 0
    assert set(out["p99_after_over_before"]) == {"replica", "node", "worst"}
    assert out["p99_after_over_before"]["worst"] == max(out["p99_after_over_before"]["replica"],
                                                        out["p99_after_over_before"]["node"])
    assert [k["kill"] for k in out["kills"]] == ["replica", "node"] and len(out["minutes"]) == 8
    assert out["replica_memory_growth"] == 0.0  # only the Decoder lived through; the Generators did not
    assert out["replica_memory_growth_by_deployment"] == {"Decoder": 0.0, "Generator": None}


def test_the_plot_draws_every_minute_on_four_panels_with_each_kill_marked():
    from benchmarks._soak_plot import soak_figure

    requests = [ok(1.0 + i, 0.1) for i in range(78)]
    samples = [replicas(5.0 + 10 * m, [(1, 1), (3, 2)]) for m in range(8)]
    result = {**summary(requests, samples, [REPLICA_KILL, NODE_KILL], 0.0, 10.0, 8, "Generator", 2),
              "plan": {"minute_s": 10.0}, "rate_rps": 1.0, "engine": "hf"}
    fig = soak_figure(result)
    assert len(fig.axes) == 4
    for ax in fig.axes:
        kill_marks = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
        assert kill_marks == [3.0, 6.0]  # minutes, at 30 s and 60 s of 10 s minutes
    rps = fig.axes[0].lines[0]
    assert list(rps.get_xdata()) == [m + 0.5 for m in range(8)] and max(rps.get_ydata()) == pytest.approx(1.0)


def test_p99_after_starts_once_the_outages_queue_is_answered_and_p99_outage_holds_the_queue():
    minute = 10.0
    before = [ok(20.0 + i, 0.1) for i in range(10)]
    queued = [ok(31.0 + i / 2, 2.0) for i in range(10)]       # the survivor's queue until the replica is back
    after = [ok(37.0 + i, 0.3) for i in range(10)]            # the replacement runs from 36
    samples = [replicas(29.0, [(1, 1), (2, 0)]), replicas(36.0, [(2, 0), (4, 1)])]
    rec = kill_figures(before + queued + after, samples, [REPLICA_KILL], 0, 0.0, minute, "Generator", 2)
    # the last request queued before the replacement (sent at 35.5) is answered at 37.5
    assert rec["first_answer_s"] == pytest.approx(3.0) and rec["replaced_s"] == 6.0
    assert rec["recovery_s"] == pytest.approx(7.5)
    assert rec["p99_after_ms"] == pytest.approx(300.0, abs=0.2)
    assert rec["p99_outage_ms"] == pytest.approx(2000.0, abs=1.0)
    # without a sample showing the replacement, there is no recovery to compare after
    rec = kill_figures(before + queued + after, samples[:1], [REPLICA_KILL], 0, 0.0, minute, "Generator", 2)
    assert rec["replaced_s"] is rec["recovery_s"] is rec["p99_after_ms"] is rec["p99_after_over_before"] is None
