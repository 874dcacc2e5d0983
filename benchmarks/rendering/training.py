"""Sections of the training benchmarks: DDP steps (a CNN and a GPT; real
architectures), FSDP2 and pipeline steps against Gloo, and fastcomm.sync's
convergence against DDP. real_models_table() is also docs/training.md's table."""

from __future__ import annotations

from fastcomm.bench.svg import grouped_bars

from rendering import text
from rendering.section import Section

MODEL_NAMES = {"gpt2": "GPT-2", "bert": "BERT", "opt": "OPT", "cnn": "CNN", "transformer": "GPT-style"}


def model_label(row: dict) -> str:
    return f"{MODEL_NAMES.get(row['model'], row['model'])} ({text.params(row['params'])})"


def _ddp_training(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    buckets = "in ordinary memory" if s.get("no_arena") else "in the arena"
    head = (
        f"{s.get('nproc')} ranks x {s.get('threads')} thread(s); median of {s.get('rounds')} alternating rounds, "
        f"slowest rank; fastcomm's buckets {buckets}; gradient_as_bucket_view={not s.get('no_bucket_view')}. "
        "comm share = 1 - local step / step (local: the same step under no_sync, no communication); "
        "Gloo step / step > 1: faster than Gloo."
    )
    body, groups = [], []
    for r in rows:
        steps, local = r["step_s"], r["step_s"]["local"]
        configs = [c for c in steps if c != "local"]
        for c in configs:
            t = steps[c]
            body.append(
                [
                    model_label(r),
                    c,
                    text.number(t, 1, 1e3),
                    f"{1 / t:.2f}",
                    f"{max(0.0, 1 - local / t) * 100:.0f}%",
                    text.ratio(steps.get("gloo"), t),
                ]
            )
        body.append(
            [model_label(r), "(local, no communication)", text.number(local, 1, 1e3), f"{1 / local:.2f}", "", ""]
        )
        groups.append((model_label(r), [(c, 1 / steps[c]) for c in configs] + [("no communication", 1 / local)]))
    table = text.table(
        ["model", "configuration", "step (ms)", "steps/s", "comm share", "Gloo step / step"], body, "llrrrr"
    )
    series = [name for _, bars in groups for name, _ in bars]
    svg = grouped_bars(
        f"DDP training on CPU, {s.get('nproc')} ranks: steps per second (higher is better)",
        groups,
        unit="steps/s",
        colours=text.colours(series),
    )
    return f"{head}\n\n{table}", svg


def real_models_table(record: dict) -> str:
    """Per model and condition, each configuration's median step, its spread, what it adds
    beyond DDP's bucket copies, its ratio to Gloo, and the busy neighbour's kept work."""
    body = []
    for row in record["results"]:
        s = row["step_s"]
        base = s.get("noop", s.get("local"))
        gloo_adds = s["gloo"] - base if "gloo" in s and base is not None else None
        rates = row.get("neighbour_work_per_s")
        for config, t in s.items():
            if config in ("local", "fastcomm+view"):
                adds = (t - s["local"]) if "local" in s else None
                adds_text = f"{adds * 1e3:.0f} vs local" if adds is not None else ""
                share = ""
            elif config == "noop":
                adds_text, share = "", ""
            elif base is None:
                adds_text, share = "", ""
            else:
                adds = t - base
                adds_text = f"{adds * 1e3:.0f}"
                share = f"{adds / gloo_adds:.2f}" if gloo_adds and gloo_adds > 0 else ""
            speed = f"{s['gloo'] / t:.2f}" if "gloo" in s else ""
            keeps = f"{rates[config] / rates['gloo']:.2f}" if rates and rates.get("gloo") else ""
            steps = (row.get("samples_s") or {}).get(config) or [t]
            body.append(
                [
                    f"{row['model']} ({text.params(row['params'])})",
                    row["condition"],
                    config,
                    f"{t:.3f}",
                    f"{min(steps):.2f}-{max(steps):.2f}",
                    adds_text,
                    share,
                    speed,
                    keeps,
                ]
            )
    return text.table(
        [
            "model",
            "condition",
            "configuration",
            "step (s)",
            "spread (s)",
            "adds (ms)",
            "adds / Gloo's",
            "Gloo step / step",
            "neighbour keeps (vs beside Gloo)",
        ],
        body,
        "lllrrrrrr",
    )


def _real_models(record: dict) -> tuple[str, str]:
    s = record["settings"]
    head = (
        f"{s.get('nproc')} ranks of one torch thread, AdamW; {s.get('steps')} timed steps per configuration and "
        f'pass, {s.get("passes")} passes in alternating order, each step\'s slowest rank. "adds": step - noop '
        '(DDP\'s bucket copies without communication; for local and fastcomm+view: step - local). "spread": the '
        'fastest and slowest step. "neighbour keeps": the busy process\'s work per second beside each '
        "configuration, relative to beside Gloo."
    )
    groups = [
        (
            f"{MODEL_NAMES.get(r['model'], r['model'])}, {'quiet' if not r['busy'] else 'busy'}",
            [(c, 1 / t) for c, t in r["step_s"].items()],
        )
        for r in record["results"]
    ]
    series = [name for _, bars in groups for name, _ in bars]
    svg = grouped_bars(
        "DDP steps of real models on CPU: steps per second (higher is better)",
        groups,
        unit="steps/s",
        colours=text.colours(series),
    )
    return f"{head}\n\n{real_models_table(record)}", svg


def _fsdp2_vs_gloo(record: dict) -> tuple[str, None]:
    s = record["settings"]
    where = f", hosts of {s['ranks_per_host']} ranks (simulated)" if s.get("ranks_per_host") else ""
    arena = "; fastcomm's buffers from its arena" if s.get("arena") else ""
    head = (
        f"{s.get('layers')} x Linear({s.get('width')}), batch {s.get('batch')} per rank{where}{arena}; median "
        f"of {s.get('rounds')} alternating rounds, slowest rank; both copies' weights compared after one step."
    )
    body = [
        [
            text.params(r["params"]),
            str(r["nproc"]),
            text.number(r["fastcomm_s"], 1, 1e3),
            text.number(r["gloo_s"], 1, 1e3),
            text.ratio(r["gloo_s"], r["fastcomm_s"]),
            f"{r['worst_relative_difference']:.1e}",
        ]
        for r in record["results"]
    ]
    table = text.table(
        ["parameters", "ranks", "fastcomm (ms)", "Gloo (ms)", "Gloo / fastcomm", "max relative difference"], body
    )
    return f"{head}\n\n{table}", None


def _pipeline_vs_gloo(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    head = (
        f"1F1B, {s.get('nproc')} stages x {s.get('layers_per_stage')} Linear+ReLU layers, {s.get('microbatches')} "
        f"microbatches of {s.get('rows')} rows; median step of {s.get('rounds')} alternating rounds, slowest rank."
    )
    body = [
        [
            str(r["width"]),
            text.size(r["message_bytes"]),
            text.number(r["fastcomm_s"], 2, 1e3),
            text.number(r["gloo_s"], 2, 1e3),
            text.ratio(r["gloo_s"], r["fastcomm_s"]),
        ]
        for r in rows
    ]
    table = text.table(["width", "message", "fastcomm (ms)", "Gloo (ms)", "Gloo / fastcomm"], body, "rrrrr")
    groups = [(f"width {r['width']}", [("Gloo", r["gloo_s"] * 1e3), ("fastcomm", r["fastcomm_s"] * 1e3)]) for r in rows]
    svg = grouped_bars(
        f"1F1B pipeline step, {s.get('nproc')} stages: ms (lower is better)",
        groups,
        unit="ms",
        colours=text.colours(["Gloo", "fastcomm"]),
    )
    return f"{head}\n\n{table}", svg


def _sync_convergence(record: dict) -> tuple[str, None]:
    s = record["settings"]
    head = (
        f"{s.get('nproc')} ranks, {s.get('backend')} groups, {s.get('steps')} steps, H = {s.get('period')}. "
        "loss: evaluation loss after the last step (mean over ranks); bytes: sent per rank over the run."
    )
    ddp = {r["task"]: r for r in record["results"] if r["configuration"] == "ddp"}
    body = []
    for r in record["results"]:
        base = ddp.get(r["task"], {})
        body.append(
            [
                r["task"],
                r["configuration"],
                f"{r['loss']:.4f}",
                text.ratio(r["loss"], base.get("loss")),
                str(r["sent_bytes"]),
                text.ratio(base.get("sent_bytes"), r["sent_bytes"]),
                text.number(r["step_s"], 2, 1e3),
            ]
        )
    table = text.table(
        ["task", "configuration", "loss", "loss / DDP's", "bytes sent", "DDP's bytes / these", "ms per step"],
        body,
        "llrrrrr",
    )
    return f"{head}\n\n{table}", None


SECTIONS = [
    Section(
        "ddp_training",
        "DDP training steps",
        "Real training steps (forward, backward with DDP's bucketed all_reduce, SGD) of a VGG-style CNN and a "
        "GPT-style decoder, every configuration from the same weights on the same batches, in alternating "
        "rounds.",
        "python benchmarks/ddp_training.py",
        _ddp_training,
    ),
    Section(
        "real_models",
        "DDP steps of real models",
        "GPT-2, BERT and OPT built from their transformers configurations (random weights) and a CNN, trained "
        "with AdamW under DDP, quiet and beside a busy process (docs/training.md explains the configurations).",
        "python benchmarks/real_models.py --models gpt2 cnn --passes 4 --steps 2",
        _real_models,
    ),
    Section(
        "fsdp2_vs_gloo",
        "FSDP2 steps against Gloo",
        "Two copies of one model, each layer its own FSDP2 unit, sharded over fastcomm and over Gloo, stepped "
        "in alternating rounds. Ratio: Gloo's step / fastcomm's (> 1: fastcomm faster).",
        "python benchmarks/fsdp2_vs_gloo.py",
        _fsdp2_vs_gloo,
    ),
    Section(
        "pipeline_vs_gloo",
        "Pipeline parallelism against Gloo",
        "torch.distributed.pipelining's 1F1B schedule over fastcomm and over Gloo, the same stages, in "
        "alternating rounds. Ratio: Gloo's step / fastcomm's.",
        "python benchmarks/pipeline_vs_gloo.py",
        _pipeline_vs_gloo,
    ),
    Section(
        "sync_convergence",
        "Model synchronisation against DDP",
        "fastcomm.sync (periodic, asynchronous and compressed averaging) against DDP on two small training "
        "tasks: the loss reached, the bytes each rank sent and the time per step.",
        "python benchmarks/sync_convergence.py",
        _sync_convergence,
    ),
]
