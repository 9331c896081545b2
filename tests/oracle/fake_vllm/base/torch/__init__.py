"""Fake torch for the oracle's unit tests: just the names the child touches."""

bfloat16 = "torch.bfloat16"
float16 = "torch.float16"


class _Cuda:
    @staticmethod
    def get_device_capability(device=None):
        raise RuntimeError("fake torch: no GPU")

    @staticmethod
    def get_device_name(device=None):
        raise RuntimeError("fake torch: no GPU")


cuda = _Cuda()
