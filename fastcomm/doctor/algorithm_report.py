"""The algorithm run (fastcomm/doctor/algorithms.py) as a table, and why the
fast paths that did not run are off, from what the group itself reports:
the algorithms it registered, its configuration after the automatic values
were resolved (backend.config), its send/recv and huge-page counters."""

from __future__ import annotations

import os

from fastcomm.doctor.report import Item

SECTION = "algorithms"


def size_text(n: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def chain_text(chain: list) -> str:
    """[[name, launches], ...] as "name > name x2"."""
    return " > ".join(name if launches == 1 else f"{name} x{launches}" for name, launches in chain) or "(nothing)"


def ranges(row: list) -> list[tuple[str, str]]:
    """(sizes, algorithms) of consecutive sizes that ran alike."""
    spans: list[list] = []  # [first bytes, last bytes, key]
    for cell in row:
        if "skipped" in cell:
            key = f"({cell['skipped']})"
        else:
            key = chain_text(cell["steady"])
            if cell["first"] != cell["steady"]:
                key += f"   (first call: {chain_text(cell['first'])})"
        if spans and spans[-1][2] == key:
            spans[-1][1] = cell["bytes"]
        else:
            spans.append([cell["bytes"], cell["bytes"], key])
    out = []
    for first, last, key in spans:
        if last == 0:
            shown = "-"
        else:
            shown = size_text(first) if first == last else f"{size_text(first)} .. {size_text(last)}"
        out.append((shown, key))
    return out


def table_text(run: dict) -> str:
    lay = run["layout"]
    r0 = run["ranks"][0]
    lines = [f"== algorithm per call ({_describe(lay)}, {run['dtype']}; what the second call of each launched)"]
    width = max(len(name) for name in r0["rows"])
    for name, row in r0["rows"].items():
        for i, (sizes, key) in enumerate(ranges(row)):
            lines.append(f"  {name if i == 0 else '':<{width}}  {sizes:<18} {key}")
    return "\n".join(lines)


def _describe(lay: dict) -> str:
    if lay["ranks_per_host"] == 0:
        return f"{lay['world_size']} rank(s) on one host"
    return f"{lay['world_size']} ranks, {lay['hosts']} hosts of {lay['ranks_per_host']} (simulated here)"


def _steady_names(row: list) -> set[str]:
    return {name for cell in row if "steady" in cell for name, _ in cell["steady"]}


def notes(run: dict, environ=os.environ) -> list[Item]:
    """Why fast paths are off (or on) for this layout, one Item each."""
    lay, ranks = run["layout"], run["ranks"]
    r0 = ranks[0]
    config, registered = r0["config"], set(r0["registered"])
    engine, hierarchical = r0["engine_local_size"] > 0, bool(r0["host_of_rank"])
    out = [Item(SECTION, "layout", "info", _describe(lay), data={"layout": lay})]
    out.append(_shared_memory(lay, r0, engine, hierarchical))
    if engine and not hierarchical:
        out.append(_single_copy(run, r0, environ))
    if "p2p_shm" in registered:
        out.append(_p2p(ranks, config, environ))
    if engine and not hierarchical:
        out.append(_huge_pages(ranks))
    if "allreduce_shm_arena" in registered:
        out.append(
            Item(
                SECTION,
                "arena tensors",
                "info",
                "read in place by the peers",
                note=f"tensors from backend.allocate_tensor (DDP's buckets with DDP_DISABLE_COMM_MEM=0): "
                f"all_reduce of {size_text(config['shm_arena_min_bytes'])} or more "
                f"(FASTCOMM_SHM_ARENA_MIN_BYTES), all_gather and reduce_scatter run on the arena "
                f"algorithms; the table uses ordinary tensors",
            )
        )
    gloo_only = [name for name, row in r0["rows"].items() if _steady_names(row) == {"gloo_fallback"}]
    if gloo_only and engine:
        out.append(
            Item(
                SECTION,
                "run by Gloo",
                "info",
                ", ".join(gloo_only),
                note="no fastcomm algorithm takes these calls on this layout: Gloo runs them",
            )
        )
    if "nccl" in registered:
        out.append(Item(SECTION, "CUDA tensors", "ok", "NCCL"))
    else:
        out.append(
            Item(SECTION, "CUDA tensors", "info", "not in this group", why=config.get("cuda_unavailable_reason", ""))
        )
    for other in ranks[1:]:
        differs = [
            name
            for name in r0["rows"]
            if [c.get("steady") for c in other["rows"][name]] != [c.get("steady") for c in r0["rows"][name]]
        ]
        if differs:
            out.append(
                Item(
                    SECTION,
                    f"rank {other['rank']}",
                    "warn",
                    f"launched other algorithms for {differs}",
                    why="ranks count their own launches; an adapter may run on some ranks only",
                    data={"rows": {name: other["rows"][name] for name in differs}},
                )
            )
    return out


def _shared_memory(lay: dict, r0: dict, engine: bool, hierarchical: bool) -> Item:
    name = "shared memory"
    if hierarchical:
        return Item(SECTION, name, "ok", "on each host; Gloo between the hosts' leaders (hierarchical algorithms)")
    if engine:
        return Item(SECTION, name, "ok", f"one segment for the host's {r0['engine_local_size']} rank(s)")
    if not r0["config"]["shm"]:
        return Item(
            SECTION,
            name,
            "off",
            "engine off",
            why="FASTCOMM_SHM=0",
            fix="unset FASTCOMM_SHM: collectives among a host's ranks then go through shared memory",
        )
    if r0["warnings"]:
        return Item(SECTION, name, "off", "engine off", why=r0["warnings"][0], fix="docs/troubleshooting.md")
    if lay["ranks_per_host"] == 1:
        return Item(
            SECTION,
            name,
            "off",
            "engine off",
            why="one rank per host: nothing to share",
            note="every call goes through Gloo; all_reduce up to FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES "
            "as one all_gather (allreduce_via_allgather)",
        )
    return Item(SECTION, name, "off", "engine off", why="the group made no engine")


def _single_copy(run: dict, r0: dict, environ) -> Item:
    name = "single-copy all_reduce"
    config = r0["config"]
    low, high = config["shm_allreduce_single_copy_min_bytes"], config["shm_allreduce_single_copy_max_bytes"]
    variable = "FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES"
    if low == 0:
        if environ.get(variable):
            why = f"{variable}={environ[variable]}"
        else:
            why = (
                f"automatic value: off where a host's ranks outnumber the CPUs they may use "
                f"({r0['engine_local_size']} ranks, {min(r['usable_cpus'] for r in run['ranks'])} CPUs)"
            )
        return Item(
            SECTION,
            name,
            "off",
            "off",
            why=why,
            fix=f"{variable}=32768 turns it on (measured slower at small sizes where ranks outnumber CPUs)",
        )
    shown = f"ordinary tensors of {size_text(low)} .. " + (size_text(high) if high < 1 << 62 else "no maximum")
    row = r0["rows"].get("all_reduce", [])
    in_range = [cell for cell in row if "steady" in cell and low <= cell["bytes"] <= high]
    if not in_range:
        return Item(SECTION, name, "info", shown, note="no size of the table is in that range")
    if any(n == "allreduce_shm_single_copy" for cell in in_range for n, _ in cell["steady"]):
        return Item(SECTION, name, "ok", shown)
    return Item(
        SECTION,
        name,
        "off",
        "refused by the kernel at the group's first single-copy all_reduce",
        why="a rank could not read or write a peer's memory: see the 'single copy' section",
        note="the group goes on with one-shot and two-shot through the segment",
    )


def _p2p(ranks: list, config: dict, environ) -> Item:
    name = "single-copy send/recv"
    threshold = config["p2p_single_copy_bytes"]
    stats = [r["p2p"] or {} for r in ranks]
    refused = sum(s.get("single_copy_refused", 0) for s in stats)
    used = sum(s.get("sent_single_copy", 0) for s in stats)
    if threshold == 0:
        return Item(
            SECTION,
            name,
            "off",
            "off",
            why="FASTCOMM_P2P_SINGLE_COPY_BYTES=0",
            fix="unset it: large messages are then read straight from the sender's memory",
        )
    if refused:
        return Item(
            SECTION,
            name,
            "off",
            f"refused {refused} time(s)",
            why="the kernel refused the receivers' reads: see the 'single copy' section",
            note="messages go through the pair's ring instead (two copies)",
        )
    shown = f"messages of {size_text(threshold)} or more read from the sender's memory"
    if used:
        return Item(SECTION, name, "ok", shown, data={"sent_single_copy": used})
    return Item(SECTION, name, "info", shown, note="no message of the table was that large")


def _huge_pages(ranks: list) -> Item:
    name = "huge pages for single copy"
    collapsed = sum(r["huge_pages"]["collapsed_buffers"] for r in ranks)
    refused = sum(r["huge_pages"]["refused_buffers"] for r in ranks)
    data = {"collapsed_buffers": collapsed, "refused_buffers": refused}
    if refused:
        return Item(
            SECTION,
            name,
            "warn",
            f"the kernel refused {refused} move(s) into huge pages",
            why="MADV_COLLAPSE needs Linux 6.1 or later and free huge pages",
            fix="none needed: single copy works in 4 KiB pages, a little slower from 4 MiB",
            data=data,
        )
    if collapsed:
        return Item(SECTION, name, "ok", f"{collapsed} reused tensor(s) moved into huge pages", data=data)
    return Item(
        SECTION,
        name,
        "info",
        "no tensor moved",
        note="only a tensor of FASTCOMM_SHM_HUGE_PAGES_MIN_BYTES or more that comes back to single copy is moved",
        data=data,
    )
