from vllm.platforms import current_platform


def get_flash_attn_version(requires_alibi=False, head_size=None, has_sinks=False):
    cap = current_platform.get_device_capability()
    if cap.major == 9:
        return 3
    if cap.major == 10:
        return 4
    return 2
