"""Separate hosts on one machine, made of Linux namespaces (needs root).

Each host is a network namespace with its own hostname (UTS namespace), its
own tmpfs on /dev/shm (mount namespace) and its own pid namespace; the hosts
are joined by veth pairs to a bridge in a "switch" namespace of their own, so
their addresses (10.213.0.1, .2, ...) exist only inside the namespaces and no
traffic leaves them. Each host's /etc/hosts maps its hostname to 127.0.1.1,
as Debian and Ubuntu do: Gloo's default device would then bind to loopback,
so ranks must be told the interface (GLOO_SOCKET_IFNAME=fc0, set by launch()).
An optional `rate` ("1gbit", "10gbit") shapes every link in both directions
with tc's token bucket.

    with NamespaceHosts(2, rate="1gbit") as hosts:
        procs = [hosts.launch(h, ["python", "job.py"]) for h in range(2)]

Everything is removed on exit, on an exception and at interpreter exit
(atexit): the processes (each host's pid namespace dies with its first
process), the namespaces, the veths and /etc/netns/<name>. Used by
tests/multihost and benchmarks/multihost.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys

INTERFACE = "fc0"  # each host's interface to the switch
SUBNET = "10.213.0"


def address(host: int) -> str:
    return f"{SUBNET}.{host + 1}"


def available() -> str:
    """Empty when namespace hosts can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network, mount and pid namespaces)"
    for tool in ("ip", "unshare", "tc", "hostname", "mount"):
        if shutil.which(tool) is None:
            return f"needs the {tool!r} command"
    probe = f"fcprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _bits_per_second(rate: str) -> int:
    for suffix, scale in (("gbit", 10**9), ("mbit", 10**6)):
        if rate.lower().endswith(suffix):
            return int(float(rate[: -len(suffix)]) * scale)
    raise ValueError(f"namespace hosts: rate {rate!r} is not <number>gbit or <number>mbit")


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"namespace hosts: {' '.join(argv)} failed: {done.stderr.strip()}")


class NamespaceHosts:
    def __init__(self, count: int, rate: str | None = None) -> None:
        assert 2 <= count <= 8, count
        self.count = count
        self.rate = rate
        tag = f"fc{os.getpid() % 100000}"
        self.switch = f"{tag}sw"
        self.names = [f"{tag}h{h}" for h in range(count)]
        self.hostnames = [f"fchost{h}" for h in range(count)]
        self._procs: list[subprocess.Popen] = []
        self._made: list[str] = []

    def __enter__(self) -> "NamespaceHosts":
        atexit.register(self.close)
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _shape(self, namespace: str, device: str) -> None:
        if not self.rate:
            return
        # Token bucket: burst of ~2 ms at the rate (at least 256 KiB), queue of 50 ms.
        burst = max(256 << 10, _bits_per_second(self.rate) // 8 // 500)
        _run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root", "tbf",
             "rate", self.rate, "burst", str(burst), "latency", "50ms")

    def _make(self) -> None:
        _run("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for h, name in enumerate(self.names):
            os.makedirs(f"/etc/netns/{name}", exist_ok=True)
            with open(f"/etc/netns/{name}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n127.0.1.1 {self.hostnames[h]}\n")
                for g in range(self.count):
                    f.write(f"{address(g)} {self.hostnames[g]}-net\n")
            _run("ip", "netns", "add", name)
            self._made.append(name)
            port = f"p{h}"
            _run("ip", "link", "add", INTERFACE + f"x{h}", "netns", name, "type", "veth", "peer", "name", port,
                 "netns", self.switch)
            _run("ip", "-n", name, "link", "set", INTERFACE + f"x{h}", "name", INTERFACE)
            _run("ip", "-n", name, "addr", "add", f"{address(h)}/24", "dev", INTERFACE)
            _run("ip", "-n", name, "link", "set", INTERFACE, "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
            _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", port, "up")
            self._shape(name, INTERFACE)
            self._shape(self.switch, port)

    def launch(self, host: int, argv: list[str], env: dict | None = None, cwd: str | None = None,
               stdout=None, stderr=None) -> subprocess.Popen:
        """Starts `argv` on `host` (as root of its pid namespace's first process's child), with
        GLOO_SOCKET_IFNAME set to its interface, its own hostname and its own /dev/shm."""
        environment = dict(os.environ if env is None else env)
        environment.setdefault("GLOO_SOCKET_IFNAME", INTERFACE)
        script = (f'hostname {self.hostnames[host]} && mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm '
                  '&& exec "$@"')
        command = ["ip", "netns", "exec", self.names[host], "unshare", "--uts", "--mount", "--pid", "--fork",
                   "--kill-child", "--mount-proc", "sh", "-c", script, "sh", *argv]
        proc = subprocess.Popen(command, env=environment, cwd=cwd, stdout=stdout, stderr=stderr,
                                start_new_session=True)
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"namespace hosts: process {proc.pid} did not end", file=sys.stderr)
        self._procs.clear()
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self._made.clear()
        for name in self.names:
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
