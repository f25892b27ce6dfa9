# SPDX-License-Identifier: Apache-2.0
# kvbake stand-in (0057): written for the kvbake example, not an upstream file.
"""Arithmetic of DeepSeek V4.1 KV page packing (kvbake stand-in).

Standard library only, so it can be imported and checked without torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Runtime switches of the stand-in chain; every one is off while unset.
SWITCHES = (
    "VLLM_DSV41_KV_PAIR",
    "VLLM_DSV41_DROP_MTP_BUFFER",
    "VLLM_DSV41_NVFP4_KV",
    "VLLM_DSV41_KV_DISPLAY",
)
KV_PAIR_CHOICES = ("3",)


def parse_kv_pair(raw: str | None) -> int:
    """Pages per allocator stride: 1 when unset or empty, else an allowed factor."""
    if raw is None or raw.strip() == "":
        return 1
    if raw.strip() not in KV_PAIR_CHOICES:
        raise ValueError(f"VLLM_DSV41_KV_PAIR={raw!r}; allowed: {KV_PAIR_CHOICES}")
    return int(raw)


def packed_capacity_tokens(num_blocks: int, block_size: int, kv_pair: int = 1) -> int:
    """Tokens a pool of num_blocks holds when kv_pair pages share each block."""
    return num_blocks * block_size * kv_pair


def packed_slot(page_index: int, kv_pair: int = 1) -> tuple[int, int]:
    """(block, slot in block) of a logical compressed page."""
    return divmod(page_index, kv_pair)


def switches_set(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The stand-in switches that hold a non-empty value in an environment."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in SWITCHES if env.get(name)}


# kvbake stand-in (0059): record widths, the NVFP4 one included. The NVFP4
# switch stays forbidden; this code ships because 0060 and 0076 size their
# buffers with it.
FP8_RECORD_BYTES = 584
NVFP4_RECORD_BYTES = 296


def kv_record_bytes(nvfp4: bool = False) -> int:
    """Bytes of one compressed KV record: FP8 unless the NVFP4 record is asked for."""
    return NVFP4_RECORD_BYTES if nvfp4 else FP8_RECORD_BYTES


def scratch_bytes(num_records: int, record_bytes: int, alignment: int = 256) -> int:
    """Bytes of scratch for num_records records, rounded up to alignment."""
    return -(-num_records * record_bytes // alignment) * alignment


# kvbake stand-in (0060): head-node memory switches.
PREFILL_BUFFER_FACTOR_CHOICES = ("4",)


def prefill_buffer_factor(raw: str | None) -> int:
    """Divisor of the indexer prefill buffer: 1 when unset or empty, else an allowed factor."""
    if raw is None or raw.strip() == "":
        return 1
    if raw.strip() not in PREFILL_BUFFER_FACTOR_CHOICES:
        raise ValueError(
            f"VLLM_INDEXER_PREFILL_BUFFER_FACTOR={raw!r}; "
            f"allowed: {PREFILL_BUFFER_FACTOR_CHOICES}"
        )
    return int(raw)


def indexer_prefill_buffer_bytes(max_tokens: int, factor: int = 1) -> int:
    """Indexer prefill scratch for max_tokens tokens split into factor chunks."""
    return scratch_bytes(-(-max_tokens // factor), kv_record_bytes())
