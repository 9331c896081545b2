import enum


class MoEActivation(enum.Enum):
    SILU = "silu"
    RELU2 = "relu2"
    RELU2_NO_MUL = "relu2_no_mul"
    SWIGLUOAI = "swigluoai"
