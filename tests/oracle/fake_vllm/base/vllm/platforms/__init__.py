_current_platform = None


def __getattr__(name):
    if name == "current_platform":
        global _current_platform
        if _current_platform is None:
            from vllm.platforms.interface import CpuPlatform

            _current_platform = CpuPlatform()
        return _current_platform
    raise AttributeError(name)
