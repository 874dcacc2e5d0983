"""Small training tasks whose loss says whether a way of synchronising ranks
still trains: the hooks' convergence tests (tests/multiproc/checks_hooks.py)
and benchmarks/sync_convergence.py use them.

teacher: classify 12 Gaussian features into 5 classes that a fixed random
         linear "teacher" assigns; TeacherNet (3 residual tanh layers) learns it.
markov:  next-token prediction on sequences from a fixed random Markov chain
         over 32 tokens (each token has a few likely successors); a 2-layer
         causal transformer (d_model 64, ~70k parameters) learns it.
Each rank draws its own batches (seeded by step and rank); the evaluation set
is the same on every rank.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class TeacherNet(nn.Module):
    """Matrices of two equal shapes (batched by PowerSGD), biases, an awkward size."""

    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.fc2 = nn.Linear(24, 24)
        self.fc3 = nn.Linear(24, 24)
        self.head = nn.Linear(24, 5)
        self.to(dtype)

    def forward(self, x):
        x = torch.tanh(self.fc1(x))
        x = torch.tanh(self.fc2(x)) + x
        x = torch.tanh(self.fc3(x)) + x
        return self.head(x)


def _teacher() -> torch.Tensor:
    return torch.randn(12, 5, generator=torch.Generator().manual_seed(7))


def teacher_batch(rank: int, step: int, rows: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of step `step`: features and the teacher's class labels."""
    x = torch.randn(rows, 12, generator=torch.Generator().manual_seed(step * 100 + rank))
    return x, (x @ _teacher()).argmax(1)


def teacher_eval_set() -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher task's evaluation set, the same on every rank."""
    x = torch.randn(512, 12, generator=torch.Generator().manual_seed(99))
    return x, (x @ _teacher()).argmax(1)


VOCAB, SEQUENCE = 32, 32


class MarkovTransformer(nn.Module):
    """A small causal transformer: token logits for each position of a sequence."""

    def __init__(self, d_model: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.position = nn.Parameter(torch.randn(SEQUENCE, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, VOCAB)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(SEQUENCE), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.encoder(h, mask=self.causal[: tokens.shape[1], : tokens.shape[1]], is_causal=True))


def _transitions() -> torch.Tensor:
    logits = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(5)) * 3.0
    return torch.softmax(logits, dim=1)


def markov_batch(rank: int, step: int, rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences of length SEQUENCE + 1: inputs and next-token targets."""
    g = torch.Generator().manual_seed(step * 100 + rank + 1_000_000)
    p = _transitions()
    tokens = torch.empty(rows, SEQUENCE + 1, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, VOCAB, (rows,), generator=g)
    for t in range(SEQUENCE):
        tokens[:, t + 1] = torch.multinomial(p[tokens[:, t]], 1, generator=g).squeeze(1)
    return tokens[:, :-1], tokens[:, 1:]


def markov_eval_set() -> tuple[torch.Tensor, torch.Tensor]:
    """The Markov task's evaluation set, the same on every rank."""
    return markov_batch(rank=-1, step=-1, rows=256)


def markov_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token logits against the targets."""
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
