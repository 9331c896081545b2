"""vLLM flags and environment for a chosen pair, spelled as a given vLLM version reads them (the backend
catalog, ``probe/data/backends.json``: since which version each flag exists, which env switches it
replaced)."""

from __future__ import annotations

from typing import Any

from probe.catalog.backends import BackendCatalog, catalog
from probe.versions import parse_version


def spell_flags(
    moe: str | None, attn: str | None, fa: int | None, quant: str, vllm: str | None
) -> tuple[list[str], dict[str, str], list[str]]:
    """vLLM arguments and environment for a pair, as that vLLM version spells them."""
    cat = catalog()
    vt = parse_version(vllm) or parse_version(cat.vllm.latest_known)
    warnings: list[str] = []
    args: list[str] = []
    env: dict[str, str] = {}
    if moe:
        _moe_flags(cat, moe, quant, vllm, vt, args, env, warnings)
    spelling = cat.vllm
    if attn:
        if vt >= parse_version(spelling.attention_backend_flag.since):  # type: ignore[operator]
            args += [a.format(value=attn) for a in spelling.attention_backend_flag.args]
        elif _env_read(cat, "VLLM_ATTENTION_BACKEND", vt):
            env["VLLM_ATTENTION_BACKEND"] = attn
    if attn == "FLASH_ATTN" and fa:
        rec = cat.find("attention", "FLASH_ATTN", fa)
        first = rec.vllm.fa_flag_since if rec is not None and rec.fa_version == fa else None
        if first and vt >= parse_version(first):  # type: ignore[operator]
            args += [a.format(value=fa) for a in spelling.fa_version_flag.args]
        elif _env_read(cat, "VLLM_FLASH_ATTN_VERSION", vt) and fa in (2, 3):
            env["VLLM_FLASH_ATTN_VERSION"] = str(fa)
        else:
            warnings.append(f"vLLM {vllm} cannot select FlashAttention {fa}")
    return args, env, warnings


def _env_read(cat: BackendCatalog, name: str, vt: Any) -> bool:
    """Whether vLLM version ``vt`` reads the environment variable ``name``."""
    spec = cat.vllm.env.get(name)
    until = parse_version(spec.until) if spec else None
    start = parse_version(spec.since) if spec else None
    return (until is None or vt <= until) and (start is None or vt >= start)


def _moe_flags(
    cat: BackendCatalog,
    moe: str,
    quant: str,
    vllm: str | None,
    vt: Any,
    args: list[str],
    env: dict[str, str],
    warnings: list[str],
) -> None:
    rec = cat.find("moe", moe)
    flag = cat.vllm.moe_backend_flag
    if vt >= parse_version(flag.since):
        if rec and vt < parse_version(rec.vllm.since):
            warnings.append(f"--moe-backend {moe} is not accepted before vLLM {rec.vllm.since}")
        args += [a.format(value=moe) for a in flag.args]
        if (
            quant == "nvfp4"
            and not moe.startswith("flashinfer")
            and _env_read(cat, "VLLM_USE_FLASHINFER_MOE_FP4", vt)
        ):
            env["VLLM_USE_FLASHINFER_MOE_FP4"] = "0"
        return
    era = rec.vllm.env_era.get(quant) if rec else None
    if era and all(_env_read(cat, k, vt) for k in era):
        env.update(era)
    else:
        warnings.append(
            f"vLLM {vllm} has no --moe-backend and no environment switch for {moe} ({quant}); "
            "it picks the MoE kernel itself"
        )


def engine_arg_flags(engine_args: dict[str, Any]) -> list[str]:
    """Extra engine arguments a measured engine cell ran with, spelled as vLLM's CLI reads them
    (``gdn_prefill_backend=triton`` -> ``--gdn-prefill-backend triton``). The cell ran on the vLLM
    version the flags are spelled for, so that version accepted them."""
    out: list[str] = []
    for key, value in sorted(engine_args.items()):
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def deployment_flags(tp: int | None, deploy: Any) -> list[str]:
    """The set-up asked for, as vLLM's serve flags: tensor / data / expert parallelism, the KV-cache
    dtype, the speculative-decoding method, eager mode (``deploy``:
    :class:`probe.recommend.types.Deployment`)."""
    import json

    out: list[str] = []
    if tp and tp > 1:
        out += ["--tensor-parallel-size", str(tp)]
    if deploy.dp > 1:
        out += ["--data-parallel-size", str(deploy.dp)]
    if deploy.ep:
        out.append("--enable-expert-parallel")
    if deploy.kv_cache_dtype != "auto":
        out += ["--kv-cache-dtype", deploy.kv_cache_dtype]
    if deploy.speculative:
        out += ["--speculative-config", json.dumps({"method": deploy.speculative})]
    if deploy.enforce_eager:
        out.append("--enforce-eager")
    return out
