import enum


class MoEActivation(enum.Enum):
    SILU = "silu"
    RELU2 = "relu2"
    SWIGLUOAI = "swigluoai"
