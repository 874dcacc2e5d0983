"""DDP training of real architectures: fastcomm against Gloo, as users train.

Models are built from their Hugging Face transformers configs (random
weights, nothing downloaded; transformers is a benchmark-only dependency) and
one CNN (the VGG-style net of ddp_training.py). Each rank trains its own
batch with AdamW under DistributedDataParallel in these configurations:

  local             the model's step without DDP: no communication at all
  noop              DDP's defaults with a hook that returns the bucket untouched:
                    DDP's own copies into and out of its buckets, no communication
  gloo              DDP's defaults on a Gloo group (torch's CPU backend)
  gloo+fp16         the same with torch's fp16_compress_hook
  fastcomm          DDP's defaults on the fastcomm group
  fastcomm+view     fastcomm with gradient_as_bucket_view=True (fastcomm's fast path:
                    the gradients are the buckets, no copies)
  fastcomm+fp16     fastcomm.hooks.register(ddp, "fp16")
  fastcomm+queue    opt-in (--configs ... fastcomm+queue): fastcomm on a group whose
                    buckets run on its op queue (FASTCOMM_SHM_ASYNC_MIN_BYTES=1 MiB,
                    the automatic value only where each rank has two cores), to
                    weigh that choice where ranks have one

"adds" is what communication adds beyond DDP's bucket copies: step - noop
(for local and fastcomm+view, whose copies are gone, step - local is shown
as the step's distance from the local step). Configurations run one after
another (a DDP per configuration, built on the same module), each with
--warmup untimed steps and --steps timed ones, for --passes passes in
alternating order; each step starts after a barrier and counts on its
slowest rank; the table gives the median and the spread (min-max) of the
steps: where the spread is wider than a difference, the difference is noise.

--busy N runs N busy processes beside the ranks (pure-Python work, like a
dataloader's workers or another job), and reports the work per second each
keeps beside each configuration, relative to beside Gloo: fastcomm must not
buy its speed with the neighbour's CPU.

    python benchmarks/real_models.py                              # quiet, then beside one busy process
    python benchmarks/real_models.py --models gpt2 cnn --passes 4 --steps 2
    python benchmarks/real_models.py --models gpt2 --conditions quiet --steps 2 --no-record

The rows go to a JSON record (benchmarks/results/real_models.json unless
--record PATH or --no-record); benchmarks/render.py makes the tables of
docs/training.md, docs/benchmarks.md and the README's headline from it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import results_record
from fastcomm.bench.harness import DDP_WARMUP_STEPS, measured, spawn_ranks

CONFIGS = ["local", "noop", "gloo", "gloo+fp16", "fastcomm", "fastcomm+view", "fastcomm+fp16"]
OPT_IN_CONFIGS = ["fastcomm+queue"]
QUEUE_MIN_BYTES = 1 << 20  # fastcomm+queue's FASTCOMM_SHM_ASYNC_MIN_BYTES
MODELS = ["gpt2", "bert", "opt", "cnn"]
BATCH, SEQUENCE = 2, 128


def build_model(name: str) -> tuple[nn.Module, callable]:
    """The model and loss_of(model, rank) -> this rank's loss on its fixed batch."""
    if name == "cnn":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ddp_training import VggNet

        model = VggNet()

        def loss_of(m, rank):
            gen = torch.Generator().manual_seed(rank)
            x, y = torch.randn(8, 3, 32, 32, generator=gen), torch.randint(0, 10, (8,), generator=gen)
            return nn.functional.cross_entropy(m(x), y)

        return model, loss_of
    import transformers

    transformers.logging.set_verbosity_error()
    config, model_class = {
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
        "bert": (transformers.BertConfig, transformers.BertForMaskedLM),
        "opt": (transformers.OPTConfig, transformers.OPTForCausalLM),
    }[name]
    torch.manual_seed(0)
    cfg = config()
    model = model_class(cfg)
    vocab = cfg.vocab_size

    def loss_of(m, rank):
        tokens = torch.randint(0, vocab, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(rank))
        return m(input_ids=tokens, labels=tokens).loss

    return model, loss_of


def model_library_versions() -> dict[str, str | None]:
    """The transformers version a record names (None where it is not installed:
    the CNN alone needs no transformers)."""
    try:
        import transformers
    except ImportError:
        return {"transformers": None}
    return {"transformers": transformers.__version__}


def noop_hook(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def queue_group():
    """A fastcomm group of every rank whose DDP buckets run on its op queue (fastcomm+queue)."""
    name = "FASTCOMM_SHM_ASYNC_MIN_BYTES"  # read when a group is made
    before = os.environ.get(name)
    os.environ[name] = str(QUEUE_MIN_BYTES)
    try:
        return dist.new_group(backend="fastcomm")
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def queue_ops(queue) -> int | None:
    """How many all_reduces fastcomm+queue's group ran on its op queue (None without the group)."""
    if queue is None:
        return None
    engine = queue._get_backend(torch.device("cpu")).shm_engine
    return engine.queued_ops if engine is not None else 0


def wrap(config: str, model: nn.Module, gloo, queue=None) -> nn.Module:
    """`model` under DDP as `config` runs it (local: the model itself; queue:
    fastcomm+queue's group)."""
    import fastcomm.hooks

    if config == "local":
        return model
    group = gloo if config.startswith("gloo") or config == "noop" else queue if config == "fastcomm+queue" else None
    ddp = DDP(model, process_group=group, gradient_as_bucket_view=config == "fastcomm+view")
    if config == "noop":
        ddp.register_comm_hook(None, noop_hook)
    elif config == "gloo+fp16":
        ddp.register_comm_hook(gloo, default_hooks.fp16_compress_hook)
    elif config == "fastcomm+fp16":
        fastcomm.hooks.register(ddp, "fp16")
    return ddp


class Neighbour:
    """Busy processes beside the ranks: each counts units of pure-Python work
    into a shared file, so the ranks can read how much work it kept doing."""

    CODE = (
        "import mmap,struct,sys\n"
        "f=open(sys.argv[1],'r+b');m=mmap.mmap(f.fileno(),8*int(sys.argv[3]))\n"
        "i=int(sys.argv[2]);n=0\n"
        "while True:\n"
        "    s=0\n"
        "    for k in range(2000): s+=k*k\n"
        "    n+=1;m[8*i:8*i+8]=struct.pack('Q',n)\n"
    )

    def __init__(self, count: int, path: str) -> None:
        self.path, self.count = path, count
        with open(path, "wb") as f:
            f.write(b"\0" * 8 * max(count, 1))
        self.procs = [
            subprocess.Popen([sys.executable, "-c", self.CODE, path, str(i), str(count)]) for i in range(count)
        ]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def read_work(path: str, count: int) -> int:
    """Units of work all the busy processes have done so far."""
    if count == 0:
        return 0
    with open(path, "rb") as f:
        data = f.read(8 * count)
    return sum(struct.unpack(f"{count}Q", data))


def on_slowest_rank(per_config: dict[str, list[float]], configs: list[str], control) -> dict[str, list[float]]:
    """Each configuration's step times, each the largest over the ranks."""
    t = torch.tensor([per_config[c] for c in configs], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
    return dict(zip(configs, t.tolist()))


def _rank(rank: int, nproc: int, store, args, neighbour_path: str, busy: int) -> list[dict]:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # denormal arithmetic would make step times drift with the weights
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=600)
    )
    gloo = dist.new_group(backend="gloo")
    control = dist.new_group(backend="gloo")
    queue = queue_group() if "fastcomm+queue" in args.configs else None
    rows = []
    for name in args.models:
        model, loss_of = build_model(name)
        params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        times: dict[str, list[float]] = {c: [] for c in args.configs}
        untimed: dict[str, list[float]] = {c: [] for c in args.configs}
        work: dict[str, list[tuple[int, float]]] = {c: [] for c in args.configs}
        for p_index in range(args.passes):
            order = args.configs if p_index % 2 == 0 else list(reversed(args.configs))
            for config in order:
                for p in model.parameters():
                    p.grad = None
                net = wrap(config, model, gloo, queue)
                for s in range(args.warmup + args.steps):
                    dist.barrier(group=control)
                    w0, t0 = read_work(neighbour_path, busy), time.perf_counter()
                    optimizer.zero_grad(set_to_none=False)
                    loss_of(net, rank).backward()
                    optimizer.step()
                    t = time.perf_counter() - t0
                    if s >= args.warmup:
                        times[config].append(t)
                        work[config].append((read_work(neighbour_path, busy) - w0, t))
                    else:
                        untimed[config].append(t)
                del net
        # Each step started after a barrier: its time on the slowest rank is the step's time.
        samples = on_slowest_rank(times, args.configs, control)
        rates = {c: sum(u for u, _ in work[c]) / sum(t for _, t in work[c]) for c in args.configs}
        rows.append(
            {
                "model": name,
                "params": params,
                "step_s": {c: statistics.median(v) for c, v in samples.items()},
                "samples_s": samples,
                # The untimed steps (--warmup per pass, in order): their one-time costs.
                "warmup_s": on_slowest_rank(untimed, args.configs, control),
                "neighbour_work_per_s": rates if busy else None,
                # fastcomm+queue's group: the all_reduces its op queue ran (None: not in the run)
                "queued_ops": queue_ops(queue),
            }
        )
        measured(rank, f"{name} ({'beside %d busy' % busy if busy else 'quiet'})")
        del model, optimizer
    dist.destroy_process_group()
    return rows


def run_condition(args, busy: int, rank_fn=None) -> list[dict]:
    """rank_fn(rank, nproc, store, args, neighbour_path, busy) (default: this script's
    steps) on args.nproc ranks beside `busy` busy processes; rank 0's rows."""
    with tempfile.TemporaryDirectory(prefix="fastcomm-neighbour-") as tmp:
        path = os.path.join(tmp, "work")
        neighbour = Neighbour(busy, path)
        try:
            return spawn_ranks(rank_fn or _rank, args.nproc, args, path, busy)
        finally:
            neighbour.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="local ranks (one torch thread each)")
    p.add_argument("--models", nargs="+", choices=MODELS, default=MODELS)
    p.add_argument("--configs", nargs="+", choices=CONFIGS + OPT_IN_CONFIGS, default=CONFIGS)
    p.add_argument("--conditions", nargs="+", choices=["quiet", "busy"], default=["quiet", "busy"])
    p.add_argument("--busy", type=int, default=1, help="busy processes in the 'busy' condition")
    p.add_argument(
        "--warmup",
        type=int,
        default=DDP_WARMUP_STEPS,
        help="untimed steps after each DDP is built (their one-time costs: fastcomm.bench.harness.DDP_WARMUP_STEPS)",
    )
    p.add_argument("--steps", type=int, default=3, help="timed steps per configuration and pass")
    p.add_argument("--passes", type=int, default=1, help="passes over the configurations, alternating order")
    results_record.add_arguments(p, "real_models")
    args = p.parse_args(argv)
    if "gloo" not in args.configs or args.nproc < 2 or args.steps < 1:
        p.error("need the gloo configuration, --nproc >= 2 and --steps >= 1")
    results = []
    for cond in args.conditions:
        busy = args.busy if cond == "busy" else 0
        for row in run_condition(args, busy):
            results.append(
                {"condition": "quiet" if busy == 0 else f"beside {busy} busy process(es)", "busy": busy, **row}
            )
    print(f"{'model':<6} {'condition':<28} " + " ".join(f"{c:>14}" for c in args.configs) + "   (median step, s)")
    for row in results:
        print(
            f"{row['model']:<6} {row['condition']:<28} " + " ".join(f"{row['step_s'][c]:>14.3f}" for c in args.configs)
        )
    results_record.save(
        args, "real_models", results, script=__file__, argv=argv, extra_versions=model_library_versions()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
