"""benchmarks/render.py's parts: text helpers (text.py), one module of sections per
family of benchmarks (collectives.py, training.py, components.py), the page
that holds them (page.py) and the README's headline table (headline.py)."""
