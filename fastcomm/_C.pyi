"""fastcomm's C++ core: the ProcessGroupFastcomm c10d backend and its kernels.

Type stubs for the compiled extension (csrc/bindings/module.cpp and
bench_loop.cpp). Users reach the backend object through
[fastcomm.fastcomm_backend][]; the module-level functions below serve the
backend's Python set-up, the tests and the benchmarks.
"""

from __future__ import annotations

import datetime
import enum
import torch
from torch._C._distributed_c10d import Backend, Store, Work

__all__ = [
    "Config",
    "HOME_QUIET_FOREIGN_SHARE",
    "SPIN_BUDGET_CEILING_US",
    "SPIN_BUDGET_FLOOR_US",
    "SPIN_BUDGET_RECENT",
    "Isa",
    "MAX_PIPELINE_PIECES",
    "ProcessGroupFastcomm",
    "ShmEngine",
    "active_isa",
    "bench_loop",
    "bench_samples",
    "best_isa",
    "cuda_kernels_compiled",
    "huge_page_counts",
    "isa_supported",
    "low_precision_sum",
    "pack",
    "pack_into",
    "pipeline_pieces",
    "reduce_buffers",
    "set_cpu_binding",
    "set_home_cpu",
    "set_isa_cap",
    "spin_budgets",
    "unpack",
]

class ProcessGroupFastcomm(Backend):
    """The c10d backend of one fastcomm process group.

    torch.distributed makes one per group and rank when the group is created;
    get it with [fastcomm.fastcomm_backend][]. Besides the methods every c10d
    backend has (`allreduce`, `broadcast`, `allgather`, `send`, `recv`,
    `barrier`, `monitored_barrier`, ...: they take lists of tensors and an
    options object and return a `Work`), it offers the methods below.
    """

    def __init__(
        self,
        rank: int,
        size: int,
        timeout: datetime.timedelta,
        config: Config,
        gloo: Backend,
        check: Backend | None = None,
        nccl: Backend | None = None,
        engine: ShmEngine | None = None,
        leaders: Backend | None = None,
        failures: Store | None = None,
    ) -> None:
        """Made by fastcomm when torch creates a group, not by users: `gloo` carries
        what fastcomm delegates on CPU, `check` compares each call's arguments
        across ranks, `nccl` carries CUDA tensors, `engine` is this rank's
        shared-memory engine, `leaders` the host leaders' group of a
        hierarchical group and `failures` where leaders post why an op failed."""

    @property
    def config(self) -> Config:
        """The configuration this group was made with."""

    @property
    def shm_engine(self) -> ShmEngine | None:
        """This rank's shared-memory engine (None when the group does not use one)."""

    @property
    def timeout(self) -> datetime.timedelta:
        """The group's timeout: it bounds every wait of every operation."""

    def algorithm_names(self) -> list[str]:
        """Registered algorithms, in the order they are asked."""

    def algorithm_counts(self) -> dict[str, int]:
        """How many times each algorithm was launched on this rank (rewrites
        count their sub-collectives too): shows which path a call took."""

    def p2p_stats(self) -> dict[str, int] | None:
        """Shared-memory send/recv of this rank (None when the group has none):
        `sent` messages, `sent_single_copy` (those the receiver read in one
        copy) and `single_copy_refused` (single-copy reads this rank's receives
        were refused by the kernel)."""

    def allocate_tensor(
        self, numel: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None
    ) -> torch.Tensor:
        """A 1-D CPU tensor of `numel` zeros in this rank's shared-memory arena
        (groups on one host). all_reduce, all_gather and reduce_scatter_tensor
        read such tensors in place on the other ranks when every rank passes
        one, with no copy through the shared segment. Takes torch's
        `Backend.allocate_tensor` keywords, as FSDP2 and DDP
        (`DDP_DISABLE_COMM_MEM=0`) pass them; any device but CPU is refused."""

    def arena_stats(self) -> dict[str, int] | None:
        """This rank's arena (None when the group has none): `blocks` held by
        tensors, `idle_blocks` kept for the next allocation, and
        `peer_mappings` (peers' blocks it maps)."""

    def all_reduce_low_precision(
        self,
        tensor: torch.Tensor,
        dtype: torch.dtype,
        scale: float,
        limit: float,
        clamped: torch.Tensor | None = None,
    ) -> Work:
        """Sums `tensor` (CPU, floating point) in place over the group, sent as
        `dtype` (float16 or bfloat16): each rank's values are multiplied by
        `scale`, finite ones beyond +-`limit` are clamped (counted into
        `clamped`, a one-element int64 tensor), rounded to `dtype`, summed in
        float32 and rounded once. The fp16 and bf16 hooks call it. Returns the
        Work."""

class ShmEngine:
    """One rank's view of its host's shared-memory segment. Made by fastcomm's
    group set-up; read its counters through
    [ProcessGroupFastcomm.shm_engine][fastcomm._C.ProcessGroupFastcomm.shm_engine]."""

    @staticmethod
    def create(local_size: int, slot_bytes: int, group_ranks: list[int], spin: bool, check_pids: bool) -> ShmEngine:
        """Creates the segment (an anonymous memory file, mode 0600) as local rank 0."""

    @staticmethod
    def attach(
        name: str,
        nonce: int,
        local_rank: int,
        slot_bytes: int,
        group_ranks: list[int],
        spin: bool,
        check_pids: bool,
    ) -> ShmEngine:
        """Maps the segment `name`, validating its header and `nonce`."""

    @property
    def segment_name(self) -> str:
        """How the other local ranks reach the segment."""

    @property
    def nonce(self) -> int:
        """The random value that identifies this segment's group."""

    @property
    def local_rank(self) -> int:
        """This rank's index among the group's ranks on its host."""

    @property
    def local_size(self) -> int:
        """The group's ranks on this host."""

    @property
    def slot_bytes(self) -> int:
        """Bytes per rank per buffer (`FASTCOMM_SHM_SLOT_BYTES`)."""

    @property
    def rounds(self) -> int:
        """Rounds posted so far."""

    @property
    def pulls(self) -> int:
        """Preempted peers this rank moved onto its own CPU so far."""

    @property
    def pieces_taken_over(self) -> int:
        """Pieces of other ranks' shares this rank did so far."""

    @property
    def moved_by_peer(self) -> bool:
        """Whether a peer moved this rank's thread since its latest op began."""

    @property
    def sleeps(self) -> int:
        """Waits, on the caller's thread or the op queue's, that went to sleep (a futex) so far."""

    @property
    def queued_ops(self) -> int:
        """Ops handed to the group's op queue so far (all_reduce of at least shm_async_min_bytes whose caller does not wait at once)."""

    @property
    def spin_budget_us(self) -> float:
        """How long the next wait on the caller's thread stays awake before it sleeps."""

    @property
    def follows_spin_budget(self) -> bool:
        """Whether waits on the caller's thread follow the spin budget (FASTCOMM_SHM_SPIN_BUDGET)."""

    @follows_spin_budget.setter
    def follows_spin_budget(self, on: bool) -> None: ...
    @property
    def home_returns(self) -> int:
        """Times this rank's op thread moved itself back to its home CPU."""

    @property
    def foreign_load(self) -> float:
        """Other processes' share of the CPUs when this rank last looked."""

class Config:
    """One process group's configuration, built once by fastcomm's Python side
    from the environment (see [Tuning](../tuning.md)) and the host plan, then
    handed to C++ whole. Each option field is the `FASTCOMM_*` variable of the
    same name in lower case, after automatic values were resolved."""

    gloo_threads: int
    allreduce_allgather_max_bytes: int
    shm: bool
    shm_spin_budget: bool
    shm_slot_bytes: int
    shm_oneshot_max_bytes: int
    shm_async_min_bytes: int
    shm_allreduce_single_copy_min_bytes: int
    shm_allreduce_single_copy_max_bytes: int
    shm_huge_pages_min_bytes: int
    shm_low_precision_arena_min_bytes: int
    shm_arena_min_bytes: int
    shm_bind_cpus: int
    shm_unbound_min_bytes: int
    pipeline_piece_bytes: int
    p2p_single_copy_bytes: int
    ranks_per_host: int
    socket_ifname: str
    host_of_rank: list[int]
    """The host index (0..H-1, hosts ordered by their lowest rank) of every
    group rank when the group runs hierarchical algorithms; empty otherwise."""
    cuda_unavailable_reason: str
    """Empty when CUDA collectives can run; otherwise why not (no NCCL, no GPU)."""

    def __init__(self) -> None:
        """A configuration with every field zero or empty."""

HOME_QUIET_FOREIGN_SHARE: float
"""Below this share of the CPUs used by other processes, a host counts as
quiet and unbound ranks' op threads return to their home CPU."""

SPIN_BUDGET_FLOOR_US: float
"""The least a wait on the caller's thread stays awake (pause loops, then yields) before it sleeps."""

SPIN_BUDGET_CEILING_US: float
"""The most a wait on the caller's thread stays awake before it sleeps."""

SPIN_BUDGET_RECENT: int
"""How many recent waits set the next wait's budget."""

def spin_budgets(waits_us: list[float]) -> list[float]:
    """The budget (microseconds) before each of `waits_us` and after the last,
    for a waiter that saw those waits in turn: 1.5x the longest of the recent
    ones, between the floor and the ceiling; the floor while one of them
    outlasted the ceiling."""

MAX_PIPELINE_PIECES: int
"""The most pieces a pipelined hierarchical collective cuts one block into."""

def set_cpu_binding(home_cpu: int, cpus: list[int], unbound_min_bytes: int) -> None:
    """Binds the process to `home_cpu` (< 0: not bound); shared-memory ops of
    at least `unbound_min_bytes` run on any of `cpus`. Call while no op runs."""

def set_home_cpu(home_cpu: int, cpus: list[int]) -> None:
    """The process's shared-memory ops return to `home_cpu` while the host's
    `cpus` are quiet (< 0: never). Call while no op runs."""

def huge_page_counts() -> dict[str, int]:
    """Since the process started: tensors moved into huge pages for
    single-copy ops (`collapsed_buffers`), the bytes moved
    (`collapsed_bytes`), and those the kernel refused (`refused_buffers`)."""

def pipeline_pieces(max_piece: int, element: int, block_bytes: int, blocks: int) -> int:
    """How many pieces a pipelined hierarchical collective cuts each block of
    `block_bytes` into, for pieces of at most `max_piece` bytes of elements of
    `element` bytes."""

class Isa(enum.Enum):
    """Instruction-set levels of the CPU kernels."""

    baseline = 0
    avx2 = 1
    avx512 = 2

def isa_supported(isa: Isa) -> bool:
    """Whether this CPU can run `isa`'s kernels."""

def best_isa() -> Isa:
    """The best instruction-set level this CPU supports."""

def active_isa() -> Isa:
    """The level every CPU kernel family uses now."""

def set_isa_cap(cap: Isa) -> None:
    """Caps the level of every CPU kernel family (tests run the baseline code
    on any CPU this way); `Isa.avx512` means no cap."""

def reduce_buffers(sources: list[torch.Tensor], out: torch.Tensor, op: str) -> None:
    """`out = sources[0] op sources[1] op ...` in that order, with the CPU
    reduction kernels at the active level. `op`: sum, product, min, max, band,
    bor or bxor; every tensor contiguous, on CPU, shaped and typed like `out`."""

def low_precision_sum(
    sources: list[torch.Tensor], out: torch.Tensor, wire: str, scale: float, limit: float
) -> list[int]:
    """The low-precision all_reduce's fused sum at the active level: `out` =
    the float32 sum of the sources, each scaled by `scale`, clamped to
    +-`limit` and rounded to `wire` ("float16" or "bfloat16"). Returns how many
    values each source had clamped."""

def bench_loop(backend: Backend, c10d_op: str, input: torch.Tensor, output: torch.Tensor, iters: int) -> float:
    """Seconds per call of the collective c10d names `c10d_op` (e.g.
    "ALLREDUCE") on `backend` (any c10d backend), looping in C++ without the
    GIL: the backend's own cost."""

def bench_samples(backend: Backend, c10d_op: str, input: torch.Tensor, output: torch.Tensor, iters: int) -> list[float]:
    """Seconds of each of `iters` calls of `c10d_op` on `backend`, each after
    the backend's own (untimed) barrier, looping in C++: the method of MPI
    latency benchmarks, per sample."""

def cuda_kernels_compiled() -> bool:
    """True when this build compiled fastcomm's CUDA kernels."""

def pack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenates contiguous tensors of one dtype and device into a flat
    tensor (multi-tensor copy kernel)."""

def unpack(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Inverse of [pack][fastcomm._C.pack]: copies consecutive pieces of
    `flat` into `tensors`."""

def pack_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copies contiguous tensors back to back into the 1-D tensor `flat`."""
