"""vLLM flags and environment for a chosen pair, spelled as a given vLLM version reads them
(``probe/data/vllm_flags.json``: since which version each flag exists, which env switches it replaced)."""

from __future__ import annotations

import functools
from typing import Any

from probe.recommend.sources import packaged_json
from probe.versions import parse_version


@functools.cache
def flags_data() -> dict[str, Any]:
    """``probe/data/vllm_flags.json`` (validated by ``probe.recommend.data_models`` in the tests)."""
    data: dict[str, Any] = packaged_json("vllm_flags.json")
    return data


def spell_flags(
    moe: str | None, attn: str | None, fa: int | None, quant: str, vllm: str | None
) -> tuple[list[str], dict[str, str], list[str]]:
    """vLLM arguments and environment for a pair, as that vLLM version spells them."""
    fd = flags_data()
    warnings: list[str] = []
    vt = parse_version(vllm) or parse_version(fd["latest_known"])
    args: list[str] = []
    env: dict[str, str] = {}

    def since(spec: dict[str, Any]) -> bool:
        return vt >= parse_version(spec["since"])  # type: ignore[operator]

    def env_read(name: str) -> bool:
        spec = fd["env"].get(name, {})
        until = parse_version(spec.get("until"))
        start = parse_version(spec.get("since"))
        return (until is None or vt <= until) and (start is None or vt >= start)  # type: ignore[operator]

    if moe:
        info = fd["moe_backends"].get(moe)
        if since(fd["moe_backend_flag"]):
            if info and vt < parse_version(info["since"]):  # type: ignore[operator]
                warnings.append(f"--moe-backend {moe} is not accepted before vLLM {info['since']}")
            args += [a.format(value=moe) for a in fd["moe_backend_flag"]["args"]]
            if (
                quant == "nvfp4"
                and not moe.startswith("flashinfer")
                and env_read("VLLM_USE_FLASHINFER_MOE_FP4")
            ):
                env["VLLM_USE_FLASHINFER_MOE_FP4"] = "0"
        else:
            era = fd["env_era_moe"].get(quant, {}).get(moe)
            if era and all(env_read(k) for k in era):
                env.update(era)
            else:
                warnings.append(
                    f"vLLM {vllm} has no --moe-backend and no environment switch for {moe} "
                    f"({quant}); it picks the MoE kernel itself"
                )
    if attn:
        if since(fd["attention_backend_flag"]):
            args += [a.format(value=attn) for a in fd["attention_backend_flag"]["args"]]
        elif env_read("VLLM_ATTENTION_BACKEND"):
            env["VLLM_ATTENTION_BACKEND"] = attn
    if attn == "FLASH_ATTN" and fa:
        spec = fd["fa_version_flag"]
        first = spec["versions"].get(str(fa))
        if first and vt >= parse_version(first):  # type: ignore[operator]
            args += [a.format(value=fa) for a in spec["args"]]
        elif env_read("VLLM_FLASH_ATTN_VERSION") and fa in (2, 3):
            env["VLLM_FLASH_ATTN_VERSION"] = str(fa)
        else:
            warnings.append(f"vLLM {vllm} cannot select FlashAttention {fa}")
    return args, env, warnings


def engine_arg_flags(engine_args: dict[str, Any]) -> list[str]:
    """Extra engine arguments a measured engine cell ran with, spelled as vLLM's CLI reads them
    (``gdn_prefill_backend=triton`` -> ``--gdn-prefill-backend triton``). The cell ran on the vLLM
    version the flags are spelled for, so that version accepted them."""
    out: list[str] = []
    for key, value in sorted(engine_args.items()):
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out
