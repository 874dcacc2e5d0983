"""Network interfaces, the address fastcomm's internal Gloo groups bind, and
the environment variables fastcomm and torch.distributed read.

Which interfaces the Gloo groups use is decided by fastcomm/_options.py
(FASTCOMM_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME) and fastcomm/_gloo.py (none
named: torch's default device, which binds the first address the hostname
resolves to that it can bind, else loopback). Interfaces are read under
`root` (sys/class/net) so tests can hand in a made-up tree.
"""

from __future__ import annotations

import dataclasses
import difflib
import fcntl
import ipaddress
import os
import socket
import struct

from fastcomm import _options
from fastcomm.doctor.report import Item

SECTION = "network"
ENV_SECTION = "environment"
SIOCGIFADDR = 0x8915
IFF_UP = 0x1
# Variables outside fastcomm's options that decide how its groups form and run.
RELATED = (
    "GLOO_SOCKET_IFNAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMP_NUM_THREADS",
    "TORCH_DISTRIBUTED_DEBUG",
    "DDP_DISABLE_COMM_MEM",
)


@dataclasses.dataclass(frozen=True)
class Interface:
    name: str
    ipv4: str | None
    up: bool


def _ipv4_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:  # no IPv4 address
            return None
    return socket.inet_ntoa(answer[20:24])


def interfaces(root: str = "/", ipv4_of=_ipv4_of) -> list[Interface]:
    """This host's interfaces (sys/class/net under `root`), each with its first
    IPv4 address (`ipv4_of(name)`) and whether it is administratively up."""
    base = os.path.join(root, "sys/class/net")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        names = sorted(name for _, name in socket.if_nameindex())
    found = []
    for name in names:
        try:
            with open(os.path.join(base, name, "flags")) as f:
                up = bool(int(f.read().strip(), 16) & IFF_UP)
        except (OSError, ValueError):
            up = False
        found.append(Interface(name, ipv4_of(name), up))
    return found


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def default_gloo_address(hostname: str) -> str | None:
    """The address torch's default Gloo device binds: the first address
    `hostname` resolves to that a socket can bind, None if none (torch then
    uses loopback)."""
    try:
        candidates = socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, kind, proto, _, address in candidates:
        try:
            with socket.socket(family, kind, proto) as s:
                s.bind((address[0], 0) if family == socket.AF_INET else (address[0], 0, 0, address[3]))
            return address[0]
        except OSError:
            continue
    return None


def gloo_item(socket_ifname: str, found: list[Interface], hostname: str, bound: str | None) -> Item:
    """Which address fastcomm's internal Gloo groups use. `socket_ifname`:
    Options.socket_ifname; `bound`: default_gloo_address(hostname)."""
    name = "Gloo binds"
    if socket_ifname:
        by_name = {i.name: i for i in found}
        chosen = [by_name.get(n, Interface(n, None, False)) for n in socket_ifname.split(",")]
        value = ", ".join(f"{i.name} ({i.ipv4 or 'no IPv4'}{'' if i.up else ', down'})" for i in chosen)
        data = {"interfaces": socket_ifname.split(","), "from": "socket_ifname"}
        bad = [i.name for i in chosen if not i.up or i.ipv4 is None]
        if bad:
            return Item(
                SECTION,
                name,
                "warn",
                value,
                why=f"interface(s) {bad} down or without an IPv4 address",
                fix="name an interface that is up and has the address peers reach",
                data=data,
            )
        if all(i.ipv4 and _is_loopback(i.ipv4) for i in chosen):
            return Item(
                SECTION,
                name,
                "warn",
                value,
                why="loopback: ranks on other hosts cannot connect",
                fix="fine on one host; across hosts name the interface peers reach (GLOO_SOCKET_IFNAME=eth0)",
                data=data,
            )
        return Item(SECTION, name, "ok", value + " (FASTCOMM_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)", data=data)
    data = {"hostname": hostname, "address": bound, "from": "hostname"}
    reachable = [i for i in found if i.up and i.ipv4 and not _is_loopback(i.ipv4)]
    suggestion = f"GLOO_SOCKET_IFNAME={reachable[0].name}" if reachable else "GLOO_SOCKET_IFNAME=<interface>"
    if bound is None:
        return Item(
            SECTION,
            name,
            "warn",
            f"loopback (hostname {hostname!r} resolves to no address it can bind)",
            why="torch falls back to loopback: ranks on other hosts cannot connect",
            fix=f"{suggestion}, or map the hostname to this host's address (/etc/hosts)",
            data=data,
        )
    if _is_loopback(bound):
        return Item(
            SECTION,
            name,
            "warn",
            f"{bound} (hostname {hostname!r} resolves to it)",
            why="a loopback address: fine on one host, but ranks on other hosts cannot connect",
            fix=f"{suggestion}, or map the hostname to this host's address (/etc/hosts)",
            data=data,
        )
    return Item(SECTION, name, "ok", f"{bound} (hostname {hostname!r} resolves to it)", data=data)


def network_items(root: str = "/", environ=os.environ) -> list[Item]:
    found = interfaces(root)
    listed = "; ".join(f"{i.name} {i.ipv4 or '-'} {'up' if i.up else 'down'}" for i in found)
    out = [
        Item(
            SECTION,
            "interfaces",
            "info",
            listed or "none found",
            data={"interfaces": [dataclasses.asdict(i) for i in found]},
        )
    ]
    try:
        socket_ifname = _options.read_options().socket_ifname
    except ValueError:  # the environment item says why; judge the hostname path here
        socket_ifname = ""
    hostname = socket.gethostname()
    out.append(gloo_item(socket_ifname, found, hostname, None if socket_ifname else default_gloo_address(hostname)))
    master = environ.get("MASTER_ADDR")
    if master:
        out.append(master_item(master))
    return out


def master_item(master: str) -> Item:
    try:
        addresses = sorted({a[4][0] for a in socket.getaddrinfo(master, None, type=socket.SOCK_STREAM)})
    except OSError as error:
        return Item(
            SECTION,
            "MASTER_ADDR",
            "warn",
            f"{master}: does not resolve ({error})",
            fix="a name or address every rank can resolve",
            data={"addresses": []},
        )
    if all(_is_loopback(a) for a in addresses):
        return Item(
            SECTION,
            "MASTER_ADDR",
            "warn",
            f"{master} -> {', '.join(addresses)}",
            why="loopback: only ranks on this host reach the store",
            fix="the store host's reachable address",
            data={"addresses": addresses},
        )
    return Item(SECTION, "MASTER_ADDR", "ok", f"{master} -> {', '.join(addresses)}", data={"addresses": addresses})


def known_variables() -> list[str]:
    """The FASTCOMM_* variables fastcomm reads at run time: one per Options field (fastcomm/_options.py)."""
    return [_options.env_name(field.name) for field in dataclasses.fields(_options.Options)]


def options_item() -> Item:
    """Whether fastcomm accepts the options in this process's environment (fastcomm/_options.py decides)."""
    try:
        _options.read_options()
    except ValueError as error:
        return Item(
            ENV_SECTION,
            "options",
            "off",
            "refused",
            why=str(error),
            fix="correct or unset the variable: every fastcomm group would fail to form",
        )
    return Item(ENV_SECTION, "options", "ok", "every FASTCOMM_* option set is valid")


def environment_items(environ=os.environ) -> list[Item]:
    """The FASTCOMM_* variables set (unknown names flagged) and the related ones."""
    out = []
    known = known_variables()
    for name in sorted(n for n in environ if n.startswith("FASTCOMM_")):
        value = environ[name]
        if name in known:
            out.append(Item(ENV_SECTION, name, "info", repr(value)))
            continue
        close = difflib.get_close_matches(name, known, n=1)
        out.append(
            Item(
                ENV_SECTION,
                name,
                "warn",
                repr(value),
                why="not an option fastcomm reads at run time",
                fix=f"did you mean {close[0]}?" if close else "see README's table of options",
            )
        )
    for name in RELATED:
        if name in environ:
            out.append(Item(ENV_SECTION, name, "info", repr(environ[name])))
    if not out:
        out.append(Item(ENV_SECTION, "variables", "info", "no FASTCOMM_* or related variable set: every default"))
    return out
