from typing import Literal

MoEBackend = Literal["auto", "triton", "cutlass", "marlin", "deep_gemm"]
