from typing import NamedTuple


class AttentionSelectorConfig(NamedTuple):
    head_size: int
    dtype: object
    kv_cache_dtype: object
    block_size: object
    use_mla: bool = False
    has_sink: bool = False
    use_sparse: bool = False
    attn_type: str = "decoder"
    has_sliding_window: bool = False
