import dataclasses
import enum


class RoutingMethodType(enum.IntEnum):
    Default = 0
    Renormalize = 1
    DeepSeekV3 = 2
    RenormalizeNaive = 4


def get_routing_method_type(scoring_func, top_k, renormalize, num_expert_group, has_e_score_bias):
    if has_e_score_bias and (num_expert_group or 0) > 0:
        return RoutingMethodType.DeepSeekV3
    return RoutingMethodType.RenormalizeNaive if renormalize else RoutingMethodType.Default


@dataclasses.dataclass
class FusedMoEParallelConfig:
    tp_size: int
    ep_size: int
    use_ep: bool

    @classmethod
    def make_no_parallel(cls):
        return cls(tp_size=1, ep_size=1, use_ep=False)


@dataclasses.dataclass
class FusedMoEConfig:
    num_experts: int
    experts_per_token: int
    hidden_dim: int
    intermediate_size: int
    num_local_experts: int
    num_logical_experts: int
    activation: object
    device: str
    routing_method: object
    moe_parallel_config: FusedMoEParallelConfig
    in_dtype: object
    moe_backend: str = "auto"
    intermediate_size_per_partition: int = dataclasses.field(default=-1, init=False)

    def __post_init__(self):
        assert self.intermediate_size % self.moe_parallel_config.tp_size == 0
        self.intermediate_size_per_partition = self.intermediate_size // self.moe_parallel_config.tp_size
