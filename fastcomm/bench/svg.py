"""A grouped bar chart as a standalone SVG string: the benchmarks' plots without
a plotting library (matplotlib is not a dependency of fastcomm)."""

from __future__ import annotations

from html import escape

PALETTE = ["#9e9e9e", "#bdbdbd", "#1f77b4", "#2ca02c", "#17becf", "#ff7f0e", "#d62728", "#9467bd"]


def grouped_bars(
    title: str, groups: list[tuple[str, list[tuple[str, float]]]], unit: str = "", colours: dict[str, str] | None = None
) -> str:
    """One cluster of bars per group (label, [(series, value), ...]); series keep
    their colour across groups (`colours` names some, the palette gives the
    rest in order), values are printed above their bars, each group has its
    own scale (groups may differ by orders of magnitude)."""
    series = list(dict.fromkeys(name for _, bars in groups for name, _ in bars))
    colour = {name: (colours or {}).get(name, PALETTE[i % len(PALETTE)]) for i, name in enumerate(series)}
    bar_w, gap, plot_h, top, left = 34, 40, 260, 50, 20
    group_w = [len(bars) * bar_w for _, bars in groups]
    width = max(left + sum(group_w) + gap * len(groups) + 20, left + 3 * 200)  # the legend's 3 columns fit
    legend_y = top + plot_h + 50
    height = legend_y + 22 * ((len(series) + 2) // 3) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>',
    ]
    x = left
    for (label, bars), w in zip(groups, group_w):
        peak = max((v for _, v in bars), default=0.0) or 1.0
        for i, (name, value) in enumerate(bars):
            h = plot_h * value / peak
            bx = x + i * bar_w
            out.append(
                f'<rect x="{bx + 2}" y="{top + plot_h - h:.1f}" width="{bar_w - 4}" height="{h:.1f}" '
                f'fill="{colour[name]}"><title>{escape(name)}: {value:.3g} {escape(unit)}</title></rect>'
            )
            out.append(
                f'<text x="{bx + bar_w / 2}" y="{top + plot_h - h - 4:.1f}" text-anchor="middle" '
                f'font-size="9">{value:.3g}</text>'
            )
        out.append(f'<line x1="{x}" y1="{top + plot_h}" x2="{x + w}" y2="{top + plot_h}" stroke="black"/>')
        out.append(f'<text x="{x + w / 2}" y="{top + plot_h + 18}" text-anchor="middle">{escape(label)}</text>')
        x += w + gap
    for i, name in enumerate(series):
        lx, ly = left + (i % 3) * 200, legend_y + 22 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{colour[name]}"/>')
        out.append(f'<text x="{lx + 18}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
