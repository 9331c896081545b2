"""Paged-KV helpers of the attention-layer probe: block size, cache layout, per-step metadata.

Child-side code (torch is handed in); kept apart from the probe so each stays small. The cache is
allocated in the backend's logical shape and physical stride order as vLLM's model runner does, the
block table is a random permutation of blocks (paged, never contiguous; block 0 stays the null
block), and ``CommonAttentionMetadata`` is filled from the fields the installed vLLM declares.
"""

from __future__ import annotations

import random
from typing import Any


def pick_block_size(sizes: Any, preferred: int = 16) -> int:
    """A kernel block size the backend accepts (ints or ``MultipleOf(base)``), ``preferred`` if it can."""
    bases: list[int] = []
    for s in sizes or []:
        base = int(getattr(s, "base", s))
        if (isinstance(s, int) and s == preferred) or (not isinstance(s, int) and preferred % base == 0):
            return preferred
        bases.append(base)
    return bases[0] if bases else preferred


def kv_cache_for(layer: Any, num_blocks: int, block_size: int, torch: Any) -> Any:
    """A zeroed KV cache in the backend's logical shape, laid out in its physical stride order."""
    be = layer.attn_backend
    shape = tuple(be.get_kv_cache_shape(num_blocks, block_size, layer.num_kv_heads, layer.head_size))
    try:
        order = tuple(be.get_kv_cache_stride_order())
        if len(order) != len(shape):
            order = tuple(range(len(shape)))
    except (AttributeError, NotImplementedError):
        order = tuple(range(len(shape)))
    dtype = (
        getattr(layer, "kv_cache_torch_dtype", None) or torch.bfloat16
    )  # the spec's dtype (FlashInfer checks)
    physical = torch.zeros(tuple(shape[i] for i in order), dtype=dtype, device="cuda")
    return physical.permute(*[order.index(i) for i in range(len(order))])


def paged_layout(prompt_lens: list[int], max_len: int, block_size: int, seed: int) -> list[list[int]]:
    """Each request's block table: blocks 1..N shuffled (paged, never contiguous; 0 is the null block)."""
    per_req = -(-max_len // block_size)
    blocks = list(range(1, 1 + per_req * len(prompt_lens)))
    random.Random(seed).shuffle(blocks)
    return [blocks[i * per_req : (i + 1) * per_req] for i in range(len(prompt_lens))]


def slots_for(table: list[int], start: int, count: int, block_size: int) -> list[int]:
    """Cache slots of token positions ``start .. start + count - 1`` of one request."""
    return [table[p // block_size] * block_size + p % block_size for p in range(start, start + count)]


class Batch:
    """Requests' block tables and token positions; builds CommonAttentionMetadata for a step."""

    def __init__(self, prompt_lens: list[int], max_len: int, block_size: int, seed: int, torch: Any) -> None:
        self.torch = torch
        self.block_size = block_size
        self.tables = paged_layout(prompt_lens, max_len, block_size, seed)
        self.num_blocks = 1 + sum(len(t) for t in self.tables)
        self.prompt_lens = list(prompt_lens)
        self.seq_lens = [0] * len(prompt_lens)

    def step_values(self, query_lens: list[int]) -> tuple[list[int], list[int]]:
        """Advance every request by its query length; (query start offsets, cache slots)."""
        starts = [0]
        slots: list[int] = []
        for r, q in enumerate(query_lens):
            slots += slots_for(self.tables[r], self.seq_lens[r], q, self.block_size)
            self.seq_lens[r] += q
            starts.append(starts[-1] + q)
        return starts, slots

    def step(self, query_lens: list[int], common_cls: Any) -> tuple[Any, Any]:
        """(CommonAttentionMetadata, slot_mapping) of the next step."""
        torch = self.torch
        prefilling = [s < p for s, p in zip(self.seq_lens, self.prompt_lens, strict=True)]  # as the runner
        starts, slots = self.step_values(query_lens)
        qsl_cpu = torch.tensor(starts, dtype=torch.int32)
        seq_cpu = torch.tensor(self.seq_lens, dtype=torch.int32)
        computed = seq_cpu - torch.tensor(query_lens, dtype=torch.int32)
        slot_mapping = torch.tensor(slots, dtype=torch.int64, device="cuda")
        values = {
            "query_start_loc": qsl_cpu.cuda(),
            "query_start_loc_cpu": qsl_cpu,
            "seq_lens": seq_cpu.cuda(),
            "seq_lens_cpu": seq_cpu,
            "_seq_lens_cpu": seq_cpu,
            "seq_lens_cpu_upper_bound": seq_cpu,
            "num_computed_tokens_cpu": computed,
            "_num_computed_tokens_cpu": computed,
            "num_reqs": len(query_lens),
            "num_actual_tokens": starts[-1],
            "max_query_len": max(query_lens),
            "max_seq_len": max(self.seq_lens),
            "block_table_tensor": torch.tensor(self.tables, dtype=torch.int32, device="cuda"),
            "slot_mapping": slot_mapping,
            "causal": True,
            "is_prefilling": torch.tensor(prefilling, dtype=torch.bool),
        }
        return make_common_metadata(common_cls, values), slot_mapping


def make_common_metadata(common_cls: Any, values: dict[str, Any]) -> Any:
    """Instantiate the installed vLLM's CommonAttentionMetadata from the fields it declares."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(common_cls)}
    missing = [
        n
        for n, f in fields.items()
        if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise TypeError(f"probe cannot fill CommonAttentionMetadata fields {missing} of this vLLM")
    return common_cls(**{k: v for k, v in values.items() if k in fields})
