"""End-to-end DDP training on CPU: fastcomm against Gloo, side by side in one run.

Real training steps (forward, backward with DDP's bucketed gradient
all_reduce overlapping it, SGD with momentum) of two models whose
communication matters, at small batches, in these configurations:

  gloo             DDP on a Gloo group (torch's default CPU backend)
  gloo+fp16        the same with torch's fp16_compress_hook
  fastcomm         DDP on the fastcomm group (buckets in its shared-memory arena,
                   DDP_DISABLE_COMM_MEM=0, unless --no-arena)
  fastcomm+fp16    fastcomm.hooks fp16 (the engine's low-precision all_reduce)
  fastcomm+powersgd  fastcomm.hooks powersgd (rank 4)

Every configuration uses DDP(gradient_as_bucket_view=True) (the gradients are
views of the buckets: no copy into them and back; --no-bucket-view for DDP's
default), starts from the same weights and sees the same batches; each
is timed in alternating rounds (fastcomm/bench/harness.py: noise hits all
alike), median step time of the slowest rank. Denormals are flushed to zero
(torch.set_flush_denormal), as CPU training should: otherwise step times
drift with the weights. "comm share" is the part of a
step that communication adds: 1 - t(local step) / t(step), where the local
step is the same step under DDP's no_sync() (no communication at all).

Models (--scale shrinks their widths for quick checks):
  cnn          VGG-style: 4 conv blocks on 32x32 images, a 4096-4096-2048 classifier
               (26 M parameters, 104 MB of float32 gradients), batch 8
  transformer  GPT-style decoder: 6 layers, d_model 640, vocabulary 8192 (36 M parameters),
               batch 4 x 32 tokens

    python benchmarks/ddp_training.py                      # both models, 2 ranks
    python benchmarks/ddp_training.py --short              # what scripts/bench.sh runs (about a minute)
    python benchmarks/ddp_training.py --models cnn --record cnn.json

The rows also go to a JSON record (benchmarks/results/ddp_training.json unless
--record PATH or --no-record); benchmarks/render.py makes the docs' table and
plot (docs/ddp_training.svg) from it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import results_record
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of

CONFIGS = ["gloo", "gloo+fp16", "fastcomm", "fastcomm+fp16", "fastcomm+powersgd"]


class VggNet(nn.Module):
    """4 conv blocks (64-128-256-256 channels at scale 1) and a large classifier."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        w = [max(4, int(c * scale)) for c in (64, 128, 256, 256)]
        hidden = max(8, int(4096 * scale))
        layers, cin = [], 3
        for c in w:
            layers += [nn.Conv2d(cin, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            cin = c
        self.features = nn.Sequential(*layers)  # 32x32 -> 2x2
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cin * 4, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class Gpt(nn.Module):
    """A small GPT: token + position embeddings, pre-norm causal decoder layers, a tied output layer."""

    def __init__(self, scale: float = 1.0, vocab: int = 8192, context: int = 32) -> None:
        super().__init__()
        d = max(16, int(640 * scale) // 16 * 16)
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(context, d)
        layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tokens(x) + self.positions(torch.arange(x.shape[1]))
        h = self.layers(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True)
        return self.norm(h) @ self.tokens.weight.t()


def _cnn_batch(rank: int):
    """This rank's images and the loss of the model's output on them."""
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    return x, lambda out: nn.functional.cross_entropy(out, y)


def _gpt_batch(rank: int):
    """This rank's tokens and the next-token loss of the model's output on them."""
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, 8192, (4, 33), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    return x, lambda out: nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


TASKS = {"cnn": (VggNet, _cnn_batch), "transformer": (Gpt, _gpt_batch)}  # model class (of scale), batch of rank


def _ddp(config: str, model: nn.Module, gloo_group, bucket_view: bool):
    """DDP of `model` for one configuration (Gloo's group, or the default: fastcomm)."""
    import fastcomm.hooks

    group = gloo_group if config.startswith("gloo") else None
    ddp = DDP(model, process_group=group, gradient_as_bucket_view=bucket_view)
    if config == "gloo+fp16":
        ddp.register_comm_hook(gloo_group, default_hooks.fp16_compress_hook)
    elif config == "fastcomm+fp16":
        fastcomm.hooks.register(ddp, "fp16", process_group=group)
    elif config == "fastcomm+powersgd":
        fastcomm.hooks.register(
            ddp, "powersgd", process_group=group, matrix_approximation_rank=4, start_powerSGD_iter=0
        )
    return ddp


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(args.threads)
    # Denormal arithmetic is slow on x86 and its share grows as the weights
    # drift (measured: the GPT's step went from 0.27 to 0.9 s within 10 steps),
    # which would time each configuration's model at a different state.
    torch.set_flush_denormal(True)
    # torch's switch for buckets in the backend's memory (read whenever DDP lays
    # out its buckets); Gloo has no such memory, so only fastcomm's DDP uses it.
    os.environ["DDP_DISABLE_COMM_MEM"] = "1" if args.no_arena else "0"
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=600)
    )
    gloo = dist.new_group(backend="gloo")
    control = dist.new_group(backend="gloo")  # timing agreement apart from the groups under test
    rows = []
    for model_name in args.models:
        model_class, batch = TASKS[model_name]
        x, loss_of = batch(rank)
        steps = {}
        for config in args.configs:
            torch.manual_seed(0)  # the same weights in every configuration and on every rank
            ddp = _ddp(config, model_class(args.scale), gloo, not args.no_bucket_view)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)

            def step(ddp=ddp, optimizer=optimizer):
                optimizer.zero_grad(set_to_none=False)
                loss_of(ddp(x)).backward()
                optimizer.step()

            steps[config] = step
            if config == args.configs[0]:
                params = sum(p.numel() for p in ddp.parameters())

                def local_step(ddp=ddp, optimizer=optimizer):
                    with ddp.no_sync():
                        step(ddp, optimizer)

                steps["local"] = local_step
        medians = alternating_rounds(
            {k: timer_of(fn) for k, fn in steps.items()},
            control,
            rounds=args.rounds,
            seconds=args.seconds,
            max_iters=args.max_iters,
            warmup_calls=args.warmup,
            warmup_seconds=0.0,
        )
        rows.append((model_name, params, medians))
        measured(rank, model_name)
    dist.destroy_process_group()
    return rows


def report(rows, args) -> str:
    lines = [
        f"# DDP training steps, {args.nproc} ranks x {args.threads} thread(s), CPU; median of {args.rounds}"
        f" alternating rounds, slowest rank; fastcomm buckets {'ordinary' if args.no_arena else 'in the arena'}"
        f"; gradient_as_bucket_view={not args.no_bucket_view}",
        "# comm share = 1 - local step / step (local: the same step under no_sync); speedup = gloo step / step",
    ]
    lines.append(
        f"{'model':<12} {'params':>7} {'config':<18} {'step ms':>8} {'steps/s':>8} {'comm share':>10} {'speedup':>8}"
    )
    for model, params, medians in rows:
        local = medians["local"]
        for config in args.configs:
            t = medians[config]
            speedup = medians["gloo"] / t if "gloo" in medians else float("nan")
            lines.append(
                f"{model:<12} {params / 1e6:>6.1f}M {config:<18} {t * 1e3:>8.1f} {1 / t:>8.2f}"
                f" {max(0.0, 1 - local / t) * 100:>9.0f}% {speedup:>8.2f}"
            )
        lines.append(
            f"{model:<12} {params / 1e6:>6.1f}M {'(local, no comm)':<18} {local * 1e3:>8.1f} {1 / local:>8.2f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=6.0, max_iters=30, warmup=2, rounds=5)
    p.add_argument("--models", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=CONFIGS)
    p.add_argument("--scale", type=float, default=1.0, help="model width factor (1: the sizes above)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--no-arena", action="store_true", help="fastcomm's DDP buckets in ordinary memory")
    p.add_argument(
        "--no-bucket-view",
        action="store_true",
        help="DDP(gradient_as_bucket_view=False), DDP's default, for every config (default here: True)",
    )
    p.add_argument("--short", action="store_true", help="3 rounds of about 0.6 s per configuration")
    results_record.add_arguments(p, "ddp_training")
    args = p.parse_args(argv)
    if args.short:
        args.rounds, args.seconds = 3, 1.8
    if args.nproc < 2 or args.rounds < 1 or args.warmup < 1:
        p.error("need --nproc >= 2, --rounds >= 1, --warmup >= 1")
    rows = spawn_ranks(_rank, args.nproc, args)
    print(report(rows, args))
    results_record.save(
        args,
        "ddp_training",
        [{"model": model, "params": params, "step_s": medians} for model, params, medians in rows],
        script=__file__,
        argv=argv,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
