"""Settings of the Ray cluster a job starts or joins."""

from __future__ import annotations

from raypipe.settings.base import Section


class RayConfig(Section):
    #: address of a running cluster; None starts (or joins, inside `ray job submit`) a local one
    address: str | None = None
    #: CPUs of a local instance raypipe starts (None: all the machine's); a cluster it joins keeps its own
    num_cpus: int | None = None
    #: echo what Ray's workers print (Ray Train, Ray Data actors, Serve replicas) on the driver's
    #: terminal; off: it stays in the session's log files, whose folder the job logs at start
    log_to_driver: bool = False
