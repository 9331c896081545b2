from typing import NamedTuple


class DeviceCapability(NamedTuple):
    major: int
    minor: int

    def to_int(self):
        return self.major * 10 + self.minor


class Platform:
    device_name = "platform"

    def is_cuda(self):
        return False

    @classmethod
    def get_device_capability(cls, device_id=0):
        return None

    @classmethod
    def has_device_capability(cls, capability, device_id=0):
        cap = cls.get_device_capability()
        return cap is not None and cap.to_int() >= capability

    @classmethod
    def is_device_capability_family(cls, capability, device_id=0):
        cap = cls.get_device_capability()
        return cap is not None and cap.to_int() // 10 == capability // 10


class CpuPlatform(Platform):
    device_name = "cpu"
