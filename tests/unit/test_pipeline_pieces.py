"""How pipelined hierarchical collectives cut a message (algorithms/hierarchical.h):
the configured piece, but never more than MAX_PIPELINE_PIECES pieces per block."""

import pytest

from fastcomm import _C

MiB = 1 << 20


@pytest.mark.parametrize(
    "block_bytes, blocks, expected",
    [
        (4 * MiB, 4, 16),  # the default 1 MiB of a 16 MiB output, 4 blocks: 256 KiB pieces
        (64 * MiB, 1, 64),  # a 64 MiB tensor: 64 pieces of 1 MiB
        (128 * MiB, 1, 64),  # 128 MiB: 64 pieces of 2 MiB, not 128 of 1 MiB
        (64 * MiB + 4, 1, 64),  # just above: still 64 (pieces of 1 MiB + 4 B, the last one shorter)
        (1, 4, 1),  # smaller than a piece: one
        (0, 4, 1),  # empty: one
    ],
)
def test_default_piece(block_bytes, blocks, expected):
    assert _C.pipeline_pieces(MiB, 4, block_bytes, blocks) == expected


@pytest.mark.parametrize(
    "max_piece, element, block_bytes, expected",
    [
        (4096, 4, 64 * MiB, 64),  # capped: pieces of exactly 1 MiB, no element more
        (4096, 4, 64 * MiB - 4, 64),  # one element less: still 64 (the last piece shorter)
        (4096, 8, 8 * 100003, 64),  # capped, an odd element count: pieces of 1563 elements, the last shorter
        (4100, 4, 16 * 1024, 4),  # below the cap: the configured piece (4100 -> 4100 B)
    ],
)
def test_exact_piece_counts(max_piece, element, block_bytes, expected):
    assert _C.pipeline_pieces(max_piece, element, block_bytes, 1) == expected


@pytest.mark.parametrize("max_piece", [4096, 4100, 65536])
@pytest.mark.parametrize("block_bytes", [4 * MiB, 4 * MiB + 4, 256 * MiB + 12])
@pytest.mark.parametrize("element", [1, 2, 4, 8])
@pytest.mark.parametrize("blocks", [1, 4, 6])
def test_small_configured_piece_is_capped(max_piece, block_bytes, element, blocks):
    """FASTCOMM_PIPELINE_PIECE_BYTES near its minimum: a 16 MiB op had thousands of
    pieces (one Gloo op each); now at most MAX_PIPELINE_PIECES."""
    pieces = _C.pipeline_pieces(max_piece, element, block_bytes, blocks)
    assert 1 <= pieces <= _C.MAX_PIPELINE_PIECES
    # never more than the configured piece gives, and as many where that is within the cap
    configured = max(element, max_piece // blocks // element * element)
    as_configured = -(-block_bytes // configured)
    assert pieces <= as_configured
    # capped: pieces no larger than they must be (about the cap, not far below it)
    assert pieces >= min(as_configured, _C.MAX_PIPELINE_PIECES // 2)
