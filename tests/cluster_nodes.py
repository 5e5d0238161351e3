"""Real Ray nodes for tests and benchmarks: a head on 127.0.0.1, or a head and workers each in its own
network namespace (as root), so that cluster traffic crosses a (virtual) network and a node can be
killed or cut off like a machine.

Every node is a `ray start --block` process: its raylet, GCS and agents are its children, so a node is
stopped (or killed, as a fault) by the ids of exactly its own processes, never by name, and never with
`ray stop` (which stops every Ray on the machine). In a namespace, `ip netns pids` lists the node's
processes as well, including Ray workers the raylet started.

Topology of `NetnsCluster`: namespace `<prefix>0` holds the head and a bridge `br0` (the head's address);
each worker namespace `<prefix>i` has one veth link `eth0` whose peer is enslaved to that bridge. The
root namespace gets no interface: drivers and clients run inside the head's namespace
(`NetnsCluster.popen(0, ...)`), and the addresses are reachable from nowhere else.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
#: a job's --config for the sections' own defaults, which the tests' jobs and their overrides are sized
#: for (without --config a job runs the demo's config)
SECTION_DEFAULTS = "--config=/dev/null"
BIN = Path(sys.executable).parent

#: Ray's node health checks, shortened so a dead or unreachable node is declared dead in a few seconds
#: instead of ~30 s; the recovery times measured under them are recorded with these values.
FAST_FAILURE_DETECTION = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    # A worker-lease request that a driver sent to a node's raylet before the node was cut off is not
    # failed when the node is declared dead: Ray's retrying RPC client queues it and retries with a
    # backoff of up to this many seconds (60 by default) before it asks the GCS whether the node is
    # dead. With the default, a partitioned node stalled the augment job ~160 s in two test runs
    # (nothing running; then it finished with the right output).
    "RAY_raylet_rpc_server_reconnect_timeout_max_s": "5",
    "RAY_core_worker_rpc_server_reconnect_timeout_max_s": "5",
    # A task already pushed to a worker on the cut-off node is failed only when the driver's gRPC
    # channel to that worker notices the silence: by keepalive pings, sent after this much idle time
    # (300 s by default) and given up after the timeout (120 s). Measured with the defaults: a 419 s
    # stall (the cut at 17:46:52, "keepalive watchdog timeout" at 17:53:51), then the right output.
    # Ray's servers accept pings this often: they take their minimum ping interval from the same value.
    "RAY_grpc_client_keepalive_time_ms": "2000",
    "RAY_grpc_client_keepalive_timeout_ms": "2000",
}

#: Nodes of one CPU each on a 2-core machine. Ray keeps one idle worker process per CPU and ends the
#: others after 1 s, so nearly every task and actor of a job started a fresh Python process (~3 s of
#: CPU each here; 62 of them for the training fault); Ray Data starts 32 actors to read parquet
#: footers; Ray Train starts a preemption watcher (spot-instance drain notices) per attempt. None of
#: this changes what a fault does; it only cost minutes.
SMALL_NODES = {
    "RAY_num_workers_soft_limit": "4",
    "RAY_idle_worker_killing_time_threshold_ms": "60000",
    "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "1",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
}


def base_env(**extra: str) -> dict[str, str]:
    """The environment for nodes and drivers: this venv first on PATH (so `python` in a job entrypoint
    is this interpreter), Ray's token auth off (local test clusters), offline model loading."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_AUTH_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "DS_ACCELERATOR": "cpu", "RAY_DEDUP_LOGS": "1", "PYTHONUNBUFFERED": "1",
           # DeepSpeed's compiled op is cached where the Makefile keeps it, not rebuilt per node
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))}
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


#: worker ports per local head
WORKER_PORTS = 200


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on 127.0.0.1 right now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def netns_unavailable() -> str | None:
    """Why namespaced nodes cannot run here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    probe = f"rpprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class RayNode:
    """One `ray start --block` process and where it lives."""

    name: str
    ip: str
    temp_dir: Path
    proc: subprocess.Popen
    netns: str | None = None
    log: Path | None = None

    def pids(self) -> list[int]:
        """The node's processes: the `ray start` process, its descendants, and (in a namespace) every
        process in that namespace."""
        found: set[int] = set()
        try:
            root = psutil.Process(self.proc.pid)
            found |= {root.pid, *(c.pid for c in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
        if self.netns:
            found |= set(netns_pids(self.netns))
        return sorted(found)

    def processes(self) -> dict[int, str]:
        """pid -> process title (Ray workers carry their actor's name, e.g. `ray::MapWorker(...)`)."""
        return process_titles(self.pids())

    def kill(self) -> float:
        """SIGKILL every process of the node at once (a machine dying); returns the time of the kill."""
        when = time.time()
        kill_all(self.pids(), signal.SIGKILL)
        return when

    def stop(self) -> None:
        """SIGKILL the node's processes (a graceful `ray stop` of a test node takes ~15 s and leaves
        nothing that matters: its temp dir is the test's), then reap `ray start`."""
        kill_all(self.pids(), signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def netns_pids(netns: str) -> list[int]:
    """Every process in a network namespace (`ip netns pids`)."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def process_titles(pids: list[int]) -> dict[int, str]:
    """pid -> command line (or name) of those still alive."""
    titles = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            titles[pid] = " ".join(p.cmdline()) or p.name()
        except psutil.Error:
            continue
    return titles


def kill_all(pids: list[int], sig: int) -> None:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.send_signal(sig)
            procs.append(p)
        except psutil.Error:
            continue
    psutil.wait_procs(procs, timeout=10)


def _launch(argv: list[str], env: dict[str, str], log: Path, netns: str | None) -> subprocess.Popen:
    cmd = ["ip", "netns", "exec", netns, *argv] if netns else argv
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_started(proc: subprocess.Popen, argv: list[str], log: Path, timeout_s: float) -> subprocess.Popen:
    """Wait until `ray start --block` says the runtime started (or fail with its log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"`{' '.join(argv)}` exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"`{' '.join(argv)}` did not start within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def start_local_head(work: Path, num_cpus: int = 2, timeout_s: float = 120, **env_extra: str) -> tuple[RayNode, str]:
    """A head on 127.0.0.1 with its own temp dir and free ports (so it never meets another Ray on this
    machine); returns the node and the dashboard address for `ray job submit --address`."""
    workers_from = min(free_ports(1)[0], 65000 - WORKER_PORTS)
    # the components' ports must lie outside the workers' range, or Ray refuses to start
    ports = [p for p in free_ports(40) if not workers_from <= p <= workers_from + WORKER_PORTS][:9]
    gcs, dash, agent, client, mgr, obj, metrics, rte, agent_grpc = ports
    temp = work / "ray"
    temp.mkdir(parents=True, exist_ok=True)
    argv = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
            f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp}", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--ray-client-server-port={client}",
            f"--node-manager-port={mgr}", f"--object-manager-port={obj}", f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={rte}", f"--min-worker-port={workers_from}",
            f"--max-worker-port={workers_from + WORKER_PORTS}", "--disable-usage-stats"]
    log = work / "head.log"
    proc = _wait_started(_launch(argv, base_env(**env_extra), log, None), argv, log, timeout_s)
    return RayNode("head", "127.0.0.1", temp, proc, log=work / "head.log"), f"http://127.0.0.1:{dash}"


@dataclass
class NetnsCluster:
    """A head and `workers` worker nodes, each in its own network namespace on one bridge."""

    work: Path
    workers: int = 2
    head_cpus: int = 1
    worker_cpus: int = 1
    subnet: str = "10.231.0"
    env: dict[str, str] = field(default_factory=lambda: {**FAST_FAILURE_DETECTION, **SMALL_NODES})
    prefix: str = field(default_factory=lambda: f"rp{secrets.token_hex(3)}")
    nodes: dict[int, RayNode] = field(default_factory=dict)
    #: nodes launched and not yet seen up: index -> (process, argv, log)
    starting: dict[int, tuple[subprocess.Popen, list[str], Path]] = field(default_factory=dict)
    gcs_port: int = 6379

    # -- network ---------------------------------------------------------------------------------
    def ns(self, i: int) -> str:
        return f"{self.prefix}{i}"

    def ip(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    @property
    def address(self) -> str:
        return f"{self.ip(0)}:{self.gcs_port}"

    def _ip(self, *args: str) -> None:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")

    def create_network(self) -> None:
        head = self.ns(0)
        self._ip("netns", "add", head)
        self._ip("-n", head, "link", "set", "lo", "up")
        self._ip("-n", head, "link", "add", "br0", "type", "bridge")
        self._ip("-n", head, "addr", "add", f"{self.ip(0)}/24", "dev", "br0")
        self._ip("-n", head, "link", "set", "br0", "up")
        for i in range(1, self.workers + 1):
            self._add_worker_ns(i)

    def _add_worker_ns(self, i: int) -> None:
        ns, head = self.ns(i), self.ns(0)
        self._ip("netns", "add", ns)
        self._ip("-n", ns, "link", "set", "lo", "up")
        self._ip("-n", head, "link", "add", f"w{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._ip("-n", head, "link", "set", f"w{i}", "master", "br0")
        self._ip("-n", head, "link", "set", f"w{i}", "up")
        self._ip("-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
        self._ip("-n", ns, "link", "set", "eth0", "up")

    def cut(self, i: int) -> float:
        """Take worker `i`'s link down (a network partition; its processes keep running)."""
        when = time.time()
        self._ip("-n", self.ns(i), "link", "set", "eth0", "down")
        return when

    def reconnect(self, i: int) -> None:
        self._ip("-n", self.ns(i), "link", "set", "eth0", "up")

    # -- Ray nodes -------------------------------------------------------------------------------
    def start_node(self, i: int, timeout_s: float = 120) -> RayNode:
        return self.start_nodes([i], timeout_s)[0]

    def start_nodes(self, indices: list[int], timeout_s: float = 120) -> list[RayNode]:
        """Start these nodes at once (worker starts overlap) and wait for each."""
        for i in indices:
            self.launch_node(i)
        self.wait_nodes(timeout_s)
        return [self.nodes[i] for i in indices]

    def launch_node(self, i: int) -> None:
        """Start node `i` without waiting for it (`wait_nodes` does)."""
        self.starting[i] = self._launch_node(i)

    def wait_nodes(self, timeout_s: float = 120) -> None:
        """Wait for the nodes launched and not yet up. A node that fails to start is started once more:
        on a loaded machine `ray start` can give up waiting for the GCS ("Deadline Exceeded") although
        nothing is wrong."""
        for i, (proc, argv, log) in list(self.starting.items()):
            try:
                _wait_started(proc, argv, log, timeout_s)
            except RuntimeError:
                self._kill_namespace(i)
                proc, argv, log = self._launch_node(i)
                _wait_started(proc, argv, log, timeout_s)
            self.nodes[i] = RayNode(f"node{i}", self.ip(i), self.work / f"n{i}", proc, netns=self.ns(i), log=log)
            del self.starting[i]

    def _kill_namespace(self, i: int) -> None:
        kill_all(netns_pids(self.ns(i)), signal.SIGKILL)

    def _launch_node(self, i: int) -> tuple[subprocess.Popen, list[str], Path]:
        temp = self.work / f"n{i}"
        temp.mkdir(parents=True, exist_ok=True)
        common = ["--block", f"--node-ip-address={self.ip(i)}", f"--temp-dir={temp}", "--num-gpus=0",
                  "--disable-usage-stats"]
        if i == 0:
            argv = [str(BIN / "ray"), "start", "--head", f"--port={self.gcs_port}", f"--num-cpus={self.head_cpus}",
                    "--include-dashboard=false", *common]
        else:
            argv = [str(BIN / "ray"), "start", f"--address={self.address}", f"--num-cpus={self.worker_cpus}",
                    *common]
        log = self.work / f"node{i}.log"
        # every namespace shares the machine's hostname, which resolves to a loopback address: torch's
        # gloo (Ray Train's CPU backend) would give its peers 127.0.0.1, so it is told the node's link
        nic = {"GLOO_SOCKET_IFNAME": "br0" if i == 0 else "eth0"}
        return _launch(argv, base_env(**self.env, **nic), log, self.ns(i)), argv, log

    def start(self) -> NetnsCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self.create_network()
            self.start_node(0)
            self.start_nodes(list(range(1, self.workers + 1)))
        except BaseException:
            self.close()
            raise
        return self

    def restart_worker(self, i: int, wait: bool = True) -> None:
        """A fresh node in worker `i`'s namespace, after a kill or a cut (old processes are killed); with
        `wait=False` it starts while the caller goes on, until the next `wait_nodes`."""
        old = self.nodes.pop(i, None)
        if old is not None:
            old.stop()
        self.reconnect(i)
        self.launch_node(i)
        if wait:
            self.wait_nodes()

    def popen(self, i: int, argv: list[str], log: Path, **env_extra: str) -> subprocess.Popen:
        """Run `argv` inside node `i`'s namespace as a driver of this cluster (RAY_ADDRESS set)."""
        env = base_env(RAY_ADDRESS=self.address, **self.env, **env_extra)
        return subprocess.Popen(["ip", "netns", "exec", self.ns(i), *argv], env=env, cwd=ROOT,
                                stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def close(self) -> None:
        """Stop every node, kill whatever still runs in the namespaces, delete them."""
        for node in list(self.nodes.values()):
            node.stop()
        self.nodes.clear()
        self.starting.clear()  # their processes are in the namespaces, killed below
        names = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        for i in range(self.workers + 1):
            ns = self.ns(i)
            if ns not in names:
                continue
            self._kill_namespace(i)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def __enter__(self) -> NetnsCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
