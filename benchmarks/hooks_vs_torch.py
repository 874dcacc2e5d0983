"""fastcomm's DDP communication hooks against torch's own, side by side: the
same model, the same process group, the same processes and run.

For each pair (fastcomm hook, torch's hook for the same compression) two
times, each in alternating rounds, median of the slowest rank:
  "call ms": the hook itself on the buckets of one step (DDP's own bucket
     objects, captured), compression + collectives + decompression, until its
     future completes; each call starts from the same bucket contents (the
     restore copy is timed alone and subtracted);
  "step ms": a DDP training step (forward + backward, where the hooks run). "rel err" is |g - g_exact| / |g_exact| of the gradient the
hook delivers after the warm-up steps, against plain all_reduce on the same
inputs: equal accuracy is part of the comparison. "ratio" = torch / fastcomm
hook time (> 1: fastcomm faster).

torch's peers: allreduce_hook, fp16_compress_hook, for bf16 the function
behind torch's bf16_compress_hook (default_hooks._compress_hook with bfloat16:
the hook itself refuses to register outside CUDA/NCCL), powerSGD_hook (same rank,
error feedback and warm start; start_powerSGD_iter=2, its minimum, so it
compresses in the timed steps; fastcomm's start_powerSGD_iter=2 too, so both have
compressed equally often when the error is measured). fastcomm's int8, topk and sign have no torch
peer; their rows show the cost and the compression achieved.

    python benchmarks/hooks_vs_torch.py                      # 2 ranks, fastcomm group, both models
    python benchmarks/hooks_vs_torch.py --backend gloo --models mlp
    python benchmarks/hooks_vs_torch.py --arena   # DDP's buckets in fastcomm's arena (DDP_DISABLE_COMM_MEM=0)

With --arena both hooks get the same arena buckets: fastcomm's fp16/bf16 read
and write them in place (docs/compression.md "On arena buckets"), torch's
compress them into a new tensor as always.

The rows also go to a JSON record (benchmarks/results/hooks_vs_torch.json
unless --record PATH or --no-record).
"""

import argparse
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import results_record
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of


def mlp() -> nn.Module:
    """8 equal 1024x1024 layers (8.4 M parameters, 34 MB of float32 gradients)."""
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(1024, 1024), nn.ReLU())])


def transformer_blocks() -> nn.Module:
    """4 transformer encoder layers, d_model 512, FFN 2048 (12.6 M parameters)."""
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)


MODELS = {
    "mlp": (mlp, lambda g: torch.randn(16, 1024, generator=g)),
    "transformer": (transformer_blocks, lambda g: torch.randn(4, 32, 512, generator=g)),
}


def torch_bf16_hook(process_group, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's bf16_compress_hook without its NCCL-only registration check: the same function body."""
    return default_hooks._compress_hook(torch.bfloat16, process_group, bucket)


def _pairs(rank_r: int, group):
    """(label, fastcomm hook name + options, torch (state, hook) factory or None)."""
    import fastcomm.hooks  # noqa: F401

    def torch_powersgd():
        state = powerSGD_hook.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=rank_r,
            start_powerSGD_iter=2,
            use_error_feedback=True,
            warm_start=True,
        )
        return state, powerSGD_hook.powerSGD_hook

    return [
        ("allreduce", ("allreduce", {}), lambda: (group, default_hooks.allreduce_hook)),
        ("fp16", ("fp16", {}), lambda: (group, default_hooks.fp16_compress_hook)),
        ("bf16", ("bf16", {}), lambda: (group, torch_bf16_hook)),
        (
            f"powersgd r={rank_r}",
            ("powersgd", {"matrix_approximation_rank": rank_r, "start_powerSGD_iter": 2}),
            torch_powersgd,
        ),
        ("int8", ("int8", {}), None),
        ("topk 5%", ("topk", {"ratio": 0.05}), None),
        ("sign", ("sign", {}), None),
    ]


def _capturing(hook, buckets: list):
    """The hook, recording the buckets DDP hands it."""

    def wrapped(state, bucket):
        buckets.append(bucket)
        return hook(state, bucket)

    return wrapped


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import os

    import fastcomm
    import fastcomm.hooks

    os.environ["DDP_DISABLE_COMM_MEM"] = "0" if args.arena else "1"  # read when DDP builds its buckets
    torch.set_num_threads(args.threads)
    dist.init_process_group(
        args.backend, store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=600)
    )
    group = None
    control = dist.new_group(backend="gloo")  # timing agreement apart from the group under test
    rows = []
    for model_name in args.models:
        make_model, make_input = MODELS[model_name]
        x = make_input(torch.Generator().manual_seed(rank))

        def ddp_of():
            torch.manual_seed(0)
            return DDP(make_model(), process_group=group)

        def step(ddp):
            ddp.zero_grad(set_to_none=False)
            ddp(x).square().mean().backward()

        def grads(ddp):
            return torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])

        exact_ddp = ddp_of()
        step(exact_ddp)
        exact = grads(exact_ddp)
        local = ddp_of()

        def local_step():
            with local.no_sync():
                step(local)

        for label, (name, options), torch_factory in _pairs(args.rank, group):
            if args.hooks and name not in args.hooks:
                continue
            impls, calls, buckets = {}, {}, {}
            fc = ddp_of()
            state = fastcomm.hooks.make_state(name, group, **options)
            state.bind(fc)
            hook = fastcomm.hooks.registry.HOOKS[name][1]
            buckets["fastcomm"] = []
            fc.register_comm_hook(state, _capturing(hook, buckets["fastcomm"]))
            impls["fastcomm"], calls["fastcomm"] = fc, (state, hook)
            errors, refused = {}, {}
            if torch_factory is not None:
                tc = ddp_of()
                torch_state, torch_hook = torch_factory()
                buckets["torch"] = []
                try:  # torch's bf16 hook refuses to register outside CUDA/NCCL: report, do not time
                    tc.register_comm_hook(torch_state, _capturing(torch_hook, buckets["torch"]))
                    tc._check_comm_hook(torch_hook)  # what register_comm_hook checks of the real hook
                    impls["torch"], calls["torch"] = tc, (torch_state, torch_hook)
                except Exception as e:
                    refused["torch"] = type(e).__name__
            for impl, ddp in impls.items():
                for _ in range(args.warmup - 1):
                    step(ddp)
                buckets[impl].clear()
                step(ddp)  # its buckets are the ones the hook calls are timed on
                errors[impl] = ((grads(ddp) - exact).norm() / exact.norm()).item()
            # the timed steps below append to the capture lists: keep this step's buckets
            buckets = {impl: list(buckets[impl]) for impl in impls}
            originals = {impl: [b.buffer().clone() for b in buckets[impl]] for impl in impls}

            def restore(impl):
                for b, original in zip(buckets[impl], originals[impl]):
                    b.buffer().copy_(original)

            def call(impl):
                restore(impl)
                hook_state, hook_fn = calls[impl]
                for b in buckets[impl]:
                    hook_fn(hook_state, b).wait()

            fns = {impl: (lambda ddp=ddp: step(ddp)) for impl, ddp in impls.items()}
            fns["local"] = local_step
            fns.update({f"call {impl}": (lambda impl=impl: call(impl)) for impl in impls})
            fns["restore"] = lambda: restore("fastcomm")
            medians = alternating_rounds(
                {impl: timer_of(fn) for impl, fn in fns.items()},
                control,
                rounds=args.rounds,
                seconds=args.seconds,
                max_iters=args.max_iters,
                warmup_calls=1,
            )
            order = ["fastcomm", "torch", "local", "call fastcomm", "call torch", "restore"]
            med = [medians.get(i, float("nan")) for i in order]
            stats = state.stats()
            rows.append(
                (
                    model_name,
                    label,
                    *med,
                    errors.get("fastcomm", float("nan")),
                    errors.get("torch", float("nan")),
                    refused.get("torch", ""),
                    stats["raw_bytes"] / stats["wire_bytes"],
                )
            )
            measured(rank, f"{model_name} {label}")
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=3.0, max_iters=50, warmup=3)
    p.add_argument("--backend", choices=["fastcomm", "gloo"], default="fastcomm")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument(
        "--hooks", nargs="+", metavar="HOOK", help="only these fastcomm hooks (default: all), e.g. fp16 bf16"
    )
    p.add_argument("--rank", type=int, default=4, help="PowerSGD's approximation rank (both sides)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--arena", action="store_true", help="DDP's buckets in the group's arena (fastcomm groups)")
    results_record.add_arguments(p, "hooks_vs_torch")
    args = p.parse_args(argv)
    if args.arena and args.backend != "fastcomm":
        p.error("--arena needs --backend fastcomm")
    if args.nproc < 2 or args.warmup < 3 or args.rounds < 1:
        p.error("need --nproc >= 2, --warmup >= 3, --rounds >= 1")
    rows = spawn_ranks(_rank, args.nproc, args)
    print(
        f"# DDP comm hooks, {args.nproc} ranks x {args.threads} thread(s), {args.backend} group;"
        f" buckets {'in the arena' if args.arena else 'ordinary'}; median of {args.rounds} alternating rounds,"
        " slowest rank"
    )
    print(
        "# call = the hook on one step's buckets; step = DDP forward+backward (no_sync step alongside);"
        " ratio = torch / fastcomm; err = |g - exact| / |exact| after warm-up; compr = raw / wire bytes"
    )
    print(
        f"{'model':<12} {'hook':<13} {'fc call':>8} {'torch call':>10} {'ratio':>6} {'fc step':>8} {'torch step':>10}"
        f" {'ratio':>6} {'no_sync':>8} {'fc err':>8} {'torch err':>9} {'compr':>6}"
    )
    for model, label, t_fc, t_torch, t_local, c_fc, c_torch, t_restore, e_fc, e_torch, refused, compr in rows:
        t_fc, t_torch, t_local, c_fc, c_torch, t_restore = (
            float(t) * 1e3 for t in (t_fc, t_torch, t_local, c_fc, c_torch, t_restore)
        )
        c_fc, c_torch = c_fc - t_restore, c_torch - t_restore
        if refused:
            cols = ("refused", "-", refused, "-")
        elif t_torch != t_torch:  # no torch peer
            cols = ("-", "-", "-", "-")
        else:
            cols = (f"{c_torch:.2f}", f"{c_torch / c_fc:.2f}", f"{t_torch:.2f}", f"{t_torch / t_fc:.2f}")
        print(
            f"{model:<12} {label:<13} {c_fc:>8.2f} {cols[0]:>10} {cols[1]:>6} {t_fc:>8.2f} {cols[2]:>10} {cols[3]:>6}"
            f" {t_local:>8.2f} {float(e_fc):>8.1e} {float(e_torch):>9.1e} {float(compr):>6.1f}"
        )
    fields = (
        "model",
        "hook",
        "fastcomm_step_s",
        "torch_step_s",
        "local_step_s",
        "fastcomm_call_s",
        "torch_call_s",
        "restore_s",
        "fastcomm_error",
        "torch_error",
        "torch_refused",
        "compression",
    )
    # no torch peer, or a refused one: its times and error are NaN, null in the record
    results_record.save(args, "hooks_vs_torch", [dict(zip(fields, row)) for row in rows], script=__file__, argv=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
