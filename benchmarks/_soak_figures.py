"""The soak's figures, from what it recorded: every request of the open-loop load (`Request`), the
replicas' memory and number sampled along the way (`Sample`) and the kills (`Kill`). Pure functions,
so that what the soak reports is unit-tested (tests/unit/test_soak_figures.py) apart from the run.

Definitions (issue 60):
- a request is *in flight* at a kill when it was sent before the kill and answered (or failed) after
  it: only those may fail because of the kill; every other failure is an error outside the in-flight
  requests;
- three times after a kill: `first_answer_s`, to the first answer to a request sent after it (service
  goes on); `replaced_s`, to the first sample with the deployment's replicas all running again, the
  victim not among them and, after a node kill, none on the dead node (capacity is back; a replica
  still in its constructor, loading its engine, does not count); `recovery_s`, to the moment every
  request sent before the replacement was running has been answered (the queue that the outage backed
  up is gone: the app is where it was before the kill); None where a sample or an answer is missing;
- p99 is compared between the requests sent in the minute before a kill and answered before it (an
  answer in flight at the kill is the kill's cost, not the app's undisturbed latency) and the ones
  sent in the minute after the recovery and answered (a failure has no latency of the app): whether
  the app is as fast after the fault as before it. What the outage itself cost in latency is
  `p99_outage_ms`, over the requests sent from the kill to the recovery. (The issue says "the minute
  after recovery"; which recovery is ours to define: with the first answer, the minute after would be
  the outage's queue draining, which `p99_outage_ms` reports.)
- replica memory is a replica process's RSS with its descendants' (an engine's child processes die with
  their replica); its growth is taken per replica process alive in both the first and the last minute
  (a replacement starts small, and a mean over replicas would hide a leak behind it).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchmarks._soak_load import Request


@dataclass(frozen=True)
class Replica:
    """One replica process as a sample saw it."""

    deployment: str
    pid: int
    node: int
    #: bytes resident, the process's and its descendants' (`raypipe.heap.tree_rss`)
    rss: int
    #: past its constructor (its engine loaded): a replica Serve can route to
    ready: bool = True


@dataclass(frozen=True)
class Sample:
    """The app's replica processes at time `t` (time.time())."""

    t: float
    replicas: tuple[Replica, ...]

    def of(self, deployment: str) -> list[Replica]:
        return [r for r in self.replicas if r.deployment == deployment]


@dataclass(frozen=True)
class Kill:
    """One fault: `kind` "replica" (the replica's process SIGKILLed) or "node" (every process of the
    worker node hosting it), at `at`."""

    kind: str
    at: float
    victim_pid: int
    #: the node that hosted the victim: the node killed, for a node kill
    node: int
    #: the deployment's replicas running at the kill
    replicas: int
    what: str


def percentile_ms(seconds: list[float], q: int) -> float | None:
    """The q-th percentile (inclusive method) in ms; None of no value."""
    if not seconds:
        return None
    if len(seconds) == 1:
        return round(seconds[0] * 1000, 1)
    return round(statistics.quantiles(seconds, n=100, method="inclusive")[q - 1] * 1000, 1)


def _answered_latencies(requests: Iterable[Request], lo: float, hi: float) -> list[float]:
    """Latencies of the answered requests sent in [lo, hi)."""
    return [r.latency_s for r in requests if r.ok and lo <= r.start < hi]


def in_flight(requests: list[Request], at: float) -> list[Request]:
    return [r for r in requests if r.start < at < r.end]


def first_answer_at(requests: list[Request], at: float) -> float | None:
    return min((r.end for r in requests if r.ok and r.start > at), default=None)


def drained_at(requests: list[Request], at: float | None) -> float | None:
    """When every request sent before `at` had its answer (or its failure); None without `at`."""
    if at is None:
        return None
    return max((r.end for r in requests if r.start < at), default=at)


def outside_in_flight(requests: list[Request], kills: list[Kill]) -> list[Request]:
    """The failed requests that were in flight at no kill."""
    return [r for r in requests if not r.ok and not any(r.start < k.at < r.end for k in kills)]


def replaced_s(samples: list[Sample], kill: Kill, deployment: str, expected: int) -> float | None:
    """Seconds from the kill to the first sample with `expected` replicas of the deployment again, the
    victim not among them and, after a node kill, none on the dead node; None if no sample shows it."""
    for s in samples:
        replicas = s.of(deployment)
        if (s.t > kill.at and len(replicas) == expected and all(r.ready for r in replicas) and all(r.pid != kill.victim_pid for r in replicas)
                and (kill.kind != "node" or all(r.node != kill.node for r in replicas))):
            return round(s.t - kill.at, 2)
    return None


def _ratio(after: float | None, before: float | None) -> float | None:
    return round(after / before, 3) if after is not None and before else None


def kill_figures(requests: list[Request], samples: list[Sample], kills: list[Kill], i: int, start: float,
                 minute_s: float, deployment: str, expected: int) -> dict[str, Any]:
    """What kill `i` cost: the requests in flight and how many of them failed, the failures outside them
    sent between it and the next kill, the three times after it, p99 before, during and after."""
    kill = kills[i]
    until = kills[i + 1].at if i + 1 < len(kills) else float("inf")
    flying = in_flight(requests, kill.at)
    first = first_answer_at(requests, kill.at)
    replaced = replaced_s(samples, kill, deployment, expected)
    back = drained_at(requests, kill.at + replaced if replaced is not None else None)
    before = percentile_ms([r.latency_s for r in requests if r.ok and kill.at - minute_s <= r.start and r.end < kill.at],
                           99)
    after = percentile_ms(_answered_latencies(requests, back, back + minute_s), 99) if back else None
    outage = percentile_ms(_answered_latencies(requests, kill.at, back), 99) if back else None

    def since(t: float | None) -> float | None:
        return round(t - kill.at, 2) if t is not None else None

    return {"kill": kill.kind, "what": kill.what, "at_s": round(kill.at - start, 2), "victim_pid": kill.victim_pid,
            "node": kill.node, "replicas_at_kill": kill.replicas, "in_flight": len(flying),
            "failed_in_flight": sum(not r.ok for r in flying),
            "errors_outside_inflight": sum(kill.at <= r.start < until for r in outside_in_flight(requests, kills)),
            "first_answer_s": since(first), "replaced_s": replaced, "recovery_s": since(back),
            "answered_after_recovery": sum(r.ok and r.start > back for r in requests) if back else 0,
            "replica_nodes_after": sorted({r.node for r in samples[-1].of(deployment)}) if samples else [],
            "p99_before_ms": before, "p99_outage_ms": outage, "p99_after_ms": after,
            "p99_after_over_before": _ratio(after, before)}


def _mean_rss(samples: list[Sample], lo: float, hi: float) -> dict[str, dict[int, float]]:
    """deployment -> pid -> mean RSS (bytes) over the samples taken in [lo, hi)."""
    seen: dict[str, dict[int, list[int]]] = {}
    for s in samples:
        if lo <= s.t < hi:
            for r in s.replicas:
                seen.setdefault(r.deployment, {}).setdefault(r.pid, []).append(r.rss)
    return {d: {pid: statistics.fmean(v) for pid, v in pids.items()} for d, pids in seen.items()}


def minute_rows(requests: list[Request], samples: list[Sample], start: float, minute_s: float,
                minutes: int) -> list[dict[str, Any]]:
    """One row per minute `m` (the requests sent in it, the answers that came in it, the samples taken
    in it): requests/s answered, p50/p99 latency, errors by kind, mean RSS per replica (MiB) and the
    fewest and most replicas seen, per deployment."""
    rows = []
    for m in range(minutes):
        lo, hi = start + m * minute_s, start + (m + 1) * minute_s
        sent = [r for r in requests if lo <= r.start < hi]
        latencies = _answered_latencies(sent, lo, hi)
        counts: dict[str, list[int]] = {}
        for s in samples:
            if lo <= s.t < hi:
                for d in {r.deployment for r in s.replicas} | set(counts):
                    counts.setdefault(d, []).append(len(s.of(d)))
        rows.append({
            "minute": m, "sent": len(sent), "rps": round(sum(r.ok and lo <= r.end < hi for r in requests) / minute_s, 3),
            "p50_ms": percentile_ms(latencies, 50), "p99_ms": percentile_ms(latencies, 99),
            "errors": dict(Counter(r.error for r in sent if not r.ok)),
            "replica_rss_mib": {d: round(statistics.fmean(pids.values()) / 2**20, 1)
                                for d, pids in sorted(_mean_rss(samples, lo, hi).items())},
            "replicas": {d: {"min": min(n), "max": max(n)} for d, n in sorted(counts.items())}})
    return rows


def memory_growth(samples: list[Sample], start: float, minute_s: float, minutes: int) -> dict[str, float | None]:
    """Per deployment: the largest last-minute over first-minute mean RSS, less 1, among its replica
    processes alive in both minutes (None when none lived through)."""
    first = _mean_rss(samples, start, start + minute_s)
    last = _mean_rss(samples, start + (minutes - 1) * minute_s, start + minutes * minute_s)
    growth: dict[str, float | None] = {}
    for d, pids in sorted(first.items()):
        both = [pid for pid in pids if pid in last.get(d, {})]
        growth[d] = round(max(last[d][pid] / pids[pid] - 1 for pid in both), 4) if both else None
    return growth


def summary(requests: list[Request], samples: list[Sample], kills: list[Kill], start: float, minute_s: float,
            minutes: int, deployment: str, expected: int) -> dict[str, Any]:
    """The soak's keys: errors outside the in-flight requests, p99 after recovery over before (per kill
    and the worst), replica memory growth (the worst and per deployment), the per-minute rows and the
    kills."""
    outside = outside_in_flight(requests, kills)
    per_kill = [kill_figures(requests, samples, kills, i, start, minute_s, deployment, expected)
                for i in range(len(kills))]
    ratios = {k["kill"]: k["p99_after_over_before"] for k in per_kill}
    growth = memory_growth(samples, start, minute_s, minutes)
    known = [g for g in ratios.values() if g is not None]
    grown = [g for g in growth.values() if g is not None]
    return {"errors_outside_inflight": len(outside),
            "errors_outside_inflight_by_kind": dict(Counter(r.error for r in outside)),
            "p99_after_over_before": {**ratios, "worst": max(known, default=None)},
            "replica_memory_growth": max(grown, default=None), "replica_memory_growth_by_deployment": growth,
            "requests": len(requests), "answered": sum(r.ok for r in requests),
            "max_latency_s": round(max((r.latency_s for r in requests), default=0.0), 2),
            "minutes": minute_rows(requests, samples, start, minute_s, minutes), "kills": per_kill}
