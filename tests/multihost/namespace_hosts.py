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
        codes, logs = hosts.torchrun([2, 2], ["job.py", "--flag"], cwd=out_dir, timeout=300)

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
import time

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
        _run(
            "ip",
            "netns",
            "exec",
            namespace,
            "tc",
            "qdisc",
            "add",
            "dev",
            device,
            "root",
            "tbf",
            "rate",
            self.rate,
            "burst",
            str(burst),
            "latency",
            "50ms",
        )

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
            _run(
                "ip",
                "link",
                "add",
                INTERFACE + f"x{h}",
                "netns",
                name,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.switch,
            )
            _run("ip", "-n", name, "link", "set", INTERFACE + f"x{h}", "name", INTERFACE)
            _run("ip", "-n", name, "addr", "add", f"{address(h)}/24", "dev", INTERFACE)
            _run("ip", "-n", name, "link", "set", INTERFACE, "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
            _run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", port, "up")
            self._shape(name, INTERFACE)
            self._shape(self.switch, port)

    def launch(
        self, host: int, argv: list[str], env: dict | None = None, cwd: str | None = None, stdout=None, stderr=None
    ) -> subprocess.Popen:
        """Starts `argv` on `host`: in its network namespace, under its hostname, with its own
        /dev/shm and pid namespace (everything started there dies with the returned process's
        group), GLOO_SOCKET_IFNAME set to its interface unless `env` sets it."""
        environment = dict(os.environ if env is None else env)
        environment.setdefault("GLOO_SOCKET_IFNAME", INTERFACE)
        script = f'hostname {self.hostnames[host]} && mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm && exec "$@"'
        command = [
            "ip",
            "netns",
            "exec",
            self.names[host],
            "unshare",
            "--uts",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "sh",
            "-c",
            script,
            "sh",
            *argv,
        ]
        proc = subprocess.Popen(command, env=environment, cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True)
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

    def torchrun(
        self,
        layout: list[int],
        program: list[str],
        cwd: str,
        timeout: float,
        env: dict | None = None,
        port: int = 29400,
    ) -> tuple[list[int | None], list[str]]:
        """Runs `program` (a Python script and its arguments) with torchrun on hosts
        0..len(layout)-1, layout[h] ranks on host h, as a user would (c10d
        rendezvous at host 0); waits at most `timeout` seconds. Returns each
        host's exit status (None: still running, then killed) and output."""
        environment = dict(os.environ if env is None else env, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        logs = [os.path.join(cwd, f"host{h}.log") for h in range(len(layout))]
        procs = []
        for h, nproc in enumerate(layout):
            with open(logs[h], "w") as log:
                procs.append(
                    self.launch(
                        h,
                        torchrun_command(len(layout), h, nproc, program, port),
                        env=environment,
                        cwd=cwd,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.2)
        codes = [p.poll() for p in procs]
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait(timeout=10)
        outputs = []
        for path in logs:
            with open(path) as f:
                outputs.append(f.read())
        return codes, outputs


def torchrun_command(hosts: int, host: int, nproc: int, program: list[str], port: int = 29400) -> list[str]:
    """torchrun as a user runs it on host `host` of `hosts`: c10d rendezvous at
    host 0's address; since the hostname resolves to 127.0.1.1, host 0 is told
    it hosts the store (is_host) and every host its own address (--local-addr,
    which torchrun hands the workers as the master address)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={hosts}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={address(0)}:{port}",
        "--rdzv-id=fastcomm",
        f"--rdzv-conf=is_host={1 if host == 0 else 0}",
        f"--local-addr={address(host)}",
        "--max-restarts=0",
        *program,
    ]
