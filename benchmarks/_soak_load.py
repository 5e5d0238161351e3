"""The soak's load client: the closed-loop saturation that sets the rate, then the open-loop load, every
request of it kept as a `Request` record.

It runs as a process of its own (`python -m benchmarks._soak_load ...`, argv from `saturate_argv` and
`open_loop_argv`) wherever the app's address is reachable: inside the head's network namespace of a
`NetnsCluster` (its addresses exist only there), or on this machine beside a local Ray instance.

Open loop: request i is sent at `start_at + i / rate` whatever the answers do, so a dead or slow
replica shows as errors and latency. A closed loop sends less exactly when the app struggles, which
would hide what the soak is there to see; it is right only for the saturation, which asks how much
the app answers when every client waits for its answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.serve_load import closed_loop, request_body


@dataclass(frozen=True)
class Request:
    """One request of the open-loop load: sent at `start`, answered or failed at `end` (time.time(),
    which the soak's driver shares, being on the same machine)."""

    start: float
    end: float
    #: the HTTP status; None when no answer came (a client timeout, a dropped connection)
    status: int | None
    #: "" for an answer; else the error's kind: "HTTP 503", "ReadTimeout", "RemoteProtocolError", ...
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def latency_s(self) -> float:
        return self.end - self.start


async def _send(client: httpx.AsyncClient, i: int, max_tokens: int) -> Request:
    start = time.time()
    try:
        r = await client.post("/v1/generate", json=request_body(i, max_tokens))
    except httpx.HTTPError as exc:
        return Request(start, time.time(), None, type(exc).__name__)
    return Request(start, time.time(), r.status_code, "" if r.status_code == 200 else f"HTTP {r.status_code}")


async def open_loop(url: str, rate: float, start_at: float, seconds: float, max_tokens: int,
                    timeout_s: float) -> list[Request]:
    """`rate` requests a second for `seconds` from `start_at`, each with a `timeout_s` client timeout;
    returns every one once the last has been answered or has failed. The connection pool has no limit:
    a bounded one would queue requests in the client, where their latency would not be the app's."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        sent = []
        for i in range(round(rate * seconds)):
            await asyncio.sleep(max(0.0, start_at + i / rate - time.time()))
            sent.append(asyncio.create_task(_send(client, i, max_tokens)))
        return list(await asyncio.gather(*sent))


def saturate(url: str, clients: int, warmup: int, seconds: float, max_tokens: int, ready_s: float) -> dict[str, Any]:
    """Once the app answers its liveness route: `warmup` requests, then `clients` closed-loop clients for
    `seconds`; the load's summary (`rps`: answers a second)."""
    from tests.cluster_faults import healthy, wait_for

    wait_for(lambda: healthy(url), ready_s, "a healthy app")
    asyncio.run(closed_loop(url, clients, ready_s, warmup, max_tokens))
    return asyncio.run(closed_loop(url, clients, seconds, sys.maxsize, max_tokens)).summary()


def saturate_argv(url: str, out: Path, clients: int, warmup: int, seconds: float, max_tokens: int,
                  ready_s: float) -> list[str]:
    return [sys.executable, "-m", "benchmarks._soak_load", "saturate", url, str(out), f"--clients={clients}",
            f"--warmup={warmup}", f"--seconds={seconds}", f"--max-tokens={max_tokens}", f"--ready-s={ready_s}"]


def open_loop_argv(url: str, out: Path, rate: float, start_at: float, seconds: float, max_tokens: int,
                   timeout_s: float) -> list[str]:
    return [sys.executable, "-m", "benchmarks._soak_load", "open", url, str(out), f"--rate={rate}",
            f"--start-at={start_at}", f"--seconds={seconds}", f"--max-tokens={max_tokens}", f"--timeout-s={timeout_s}"]


def read_requests(path: Path) -> list[Request]:
    return [Request(**r) for r in json.loads(path.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._soak_load", description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    for mode in ("saturate", "open"):
        sub = modes.add_parser(mode)
        sub.add_argument("url")
        sub.add_argument("out", type=Path)
        sub.add_argument("--seconds", type=float, required=True)
        sub.add_argument("--max-tokens", type=int, required=True)
    modes.choices["saturate"].add_argument("--clients", type=int, required=True)
    modes.choices["saturate"].add_argument("--warmup", type=int, required=True)
    modes.choices["saturate"].add_argument("--ready-s", type=float, required=True)
    modes.choices["open"].add_argument("--rate", type=float, required=True)
    modes.choices["open"].add_argument("--start-at", type=float, required=True)
    modes.choices["open"].add_argument("--timeout-s", type=float, required=True)
    args = parser.parse_args()
    if args.mode == "saturate":
        body: Any = saturate(args.url, args.clients, args.warmup, args.seconds, args.max_tokens, args.ready_s)
    else:
        body = [asdict(r) for r in asyncio.run(open_loop(args.url, args.rate, args.start_at, args.seconds,
                                                         args.max_tokens, args.timeout_s))]
    args.out.write_text(json.dumps(body))


if __name__ == "__main__":
    main()
