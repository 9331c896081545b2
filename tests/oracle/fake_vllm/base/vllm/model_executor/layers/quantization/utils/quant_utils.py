from typing import NamedTuple


class QuantKey(NamedTuple):
    dtype: str
    scale: str


class GroupShape(NamedTuple):
    row: int
    col: int


def create_fp8_quant_key(static, group_shape):
    return QuantKey("fp8", f"block{tuple(group_shape)}")


kNvfp4Static = QuantKey("nvfp4", "static")
kNvfp4Dynamic = QuantKey("nvfp4", "dynamic")
kFp8StaticTensorSym = QuantKey("fp8", "static")
kFp8DynamicTensorSym = QuantKey("fp8", "dynamic")
kFp8Dynamic128Sym = QuantKey("fp8", "dynamic128")
kInt4StaticGroupScale = "group"
