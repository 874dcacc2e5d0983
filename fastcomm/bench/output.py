"""nccl-tests' text layout (common.cu's format strings), JSON and the plot."""

from __future__ import annotations

import json

from fastcomm.bench.harness import Measurement, Row, errors, summary


def format_time(us: float) -> str:
    """Microseconds as nccl-tests prints them (7 wide, fewer decimals as they grow)."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def _cell(m: Measurement | None) -> str:
    if m is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>5}"
    if m.error is not None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'error':>5}"
    wrong = "N/A" if m.wrong is None else str(m.wrong)
    return f"  {format_time(m.time_us):>7}  {m.algbw:6.2f}  {m.busbw:6.2f}  {wrong:>5}"


def format_row(row: Row) -> str:
    """One table line: size, count, type, op, root, then both variants' columns."""
    return (
        f"{row.size:12d}  {row.count:12d}  {row.dtype:>8}  {row.op:>6}  {row.root:6d}"
        + _cell(row.out_of_place)
        + _cell(row.in_place)
    )


def header(title_lines: list[str]) -> list[str]:
    """The comment lines above the table: the title, then the column headings."""
    lines = [f"# {t}" if t else "#" for t in title_lines]
    lines.append("#")
    lines.append(
        f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place          "
    )
    lines.append(
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" * 2
    )
    lines.append(
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" * 2
    )
    return lines


def footer(rows: list[Row]) -> list[str]:
    """nccl-tests' closing lines: wrong values, average bus bandwidth, failed calls."""
    wrong, avg = summary(rows)
    failed = errors(rows)
    lines = [
        f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong or failed else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {avg:g} ",
    ]
    if failed:
        lines.append(f"# {'Failed calls':<20} : {len(failed)} (first: {failed[0]})")
    return lines + ["#"]


def table(title_lines: list[str], rows: list[Row]) -> str:
    """One backend's whole table: header, rows, footer."""
    return "\n".join(header(title_lines) + [format_row(r) for r in rows] + footer(rows))


def _best(m_rows: Row) -> Measurement | None:
    return m_rows.out_of_place or m_rows.in_place


def compare_table(labels: list[str], rows: dict[str, list[Row]]) -> str:
    """Side by side per size: times, busbw, and ratio = time(second) / time(first)."""
    a, b = labels
    lines = [
        f"# side by side: {a} vs {b}; ratio = {b} time / {a} time (> 1: {a} faster);"
        f" out-of-place where it exists, else in-place",
        f"# {'size':>10}  {'type':>8}  {'redop':>6}  {a + ' us':>12}  {b + ' us':>12}  {a + ' busbw':>14}  {b + ' busbw':>14}  {'ratio':>6}",
    ]
    for ra, rb in zip(rows[a], rows[b]):
        ma, mb = _best(ra), _best(rb)
        if ma.error or mb.error:
            lines.append(
                f"{ra.size:12d}  {ra.dtype:>8}  {ra.op:>6}  {'error' if ma.error else f'{ma.time_us:.2f}':>12}"
                f"  {'error' if mb.error else f'{mb.time_us:.2f}':>12}  {'N/A':>14}  {'N/A':>14}  {'N/A':>6}"
            )
            continue
        ratio = mb.time_us / ma.time_us if ma.time_us > 0 else float("inf")
        lines.append(
            f"{ra.size:12d}  {ra.dtype:>8}  {ra.op:>6}  {ma.time_us:12.2f}  {mb.time_us:12.2f}  {ma.busbw:14.3f}  {mb.busbw:14.3f}  {ratio:6.2f}"
        )
    return "\n".join(lines)


def _row_dict(row: Row) -> dict:
    def m(x: Measurement | None):
        if x is None:
            return None
        return {"time_us": x.time_us, "algbw": x.algbw, "busbw": x.busbw, "wrong": x.wrong, "error": x.error}

    return {
        "size": row.size,
        "count": row.count,
        "type": row.dtype,
        "redop": row.op,
        "root": row.root,
        "out_of_place": m(row.out_of_place),
        "in_place": m(row.in_place),
    }


def to_json(meta: dict, rows: dict[str, list[Row]]) -> str:
    """`meta` plus every backend's rows and summary, as indented JSON."""
    out = dict(meta)
    out["results"] = {}
    for label, rs in rows.items():
        wrong, avg = summary(rs)
        out["results"][label] = {
            "rows": [_row_dict(r) for r in rs],
            "summary": {
                "out_of_bounds": wrong,
                "failed_calls": len(errors(rs)),
                "ok": wrong == 0 and not errors(rs),
                "avg_busbw": avg,
            },
        }
    return json.dumps(out, indent=2)


def plot(path: str, title: str, rows: dict[str, list[Row]]) -> None:
    """Bus bandwidth against size, one line per backend, saved to `path` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, rs in rows.items():
        first = (rs[0].dtype, rs[0].op)  # one line per backend: the first dtype and op of the sweep
        keyed = [(r.size, _best(r)) for r in rs if (r.dtype, r.op) == first and not _best(r).error]
        ax.plot([s for s, _ in keyed], [m.busbw for _, m in keyed], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (B)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
