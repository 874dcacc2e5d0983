"""fastcomm.bench.svg: the benchmarks' bar charts."""

import re

from fastcomm.bench.svg import grouped_bars


def test_bars_scale_per_group_and_legend_fits():
    """Each group's tallest bar spans the plot height; every series keeps one
    colour; the legend's last column has room for a name inside the width
    (a narrow chart of one small group clipped it before)."""
    series = ["gloo", "gloo+fp16", "fastcomm", "fastcomm+fp16", "fastcomm+powersgd", "no communication"]
    svg = grouped_bars("t", [("a", [(s, 1.0 + i) for i, s in enumerate(series)]), ("b", [(series[0], 1000.0)])])
    width = float(re.search(r'<svg [^>]*width="([\d.]+)"', svg).group(1))
    heights = [float(h) for h in re.findall(r'<rect x="[\d.]+" y="[\d.]+" width="\d+" height="([\d.]+)" fill', svg)]
    assert heights[len(series) - 1] == 260.0 and heights[len(series)] == 260.0  # each group's peak
    colours = dict(re.findall(r'fill="(#[0-9a-f]+)"><title>([^:]+):', svg)[::-1])
    assert len(set(colours)) == len(series)
    legend_x = [
        float(x) for x, name in re.findall(r'<text x="([\d.]+)" y="[\d.]+">([^<]+)</text>', svg) if name in series
    ]
    assert len(legend_x) == len(series) and width - max(legend_x) >= 150, (width, legend_x)
    small = grouped_bars("t", [("a", [(s, 1.0) for s in series[:2]])])
    assert float(re.search(r'<svg [^>]*width="([\d.]+)"', small).group(1)) >= 20 + 3 * 200
