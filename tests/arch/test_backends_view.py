"""Backend-view logic on synthetic scan records (real catalog rules, hand-made files)."""

from __future__ import annotations

import json

import pytest

from probe.arch.backend_rules import RANK, path_matches
from probe.arch.backend_view import (
    backend_table,
    backend_view,
    backends_json,
    render_markdown,
    render_table,
)
from probe.arch.records import Entry, FileRecord, KernelInfo, ScanReport
from probe.catalog.backends import catalog as backend_catalog
from probe.catalog.gpus import catalog, parse_target

BF16, FP16, E4M3 = 1125899906909960, 1125899906910725, 2814749767172868


def marlin(a_type: int, stages: int) -> str:
    return (
        f"void marlin_moe_wna16::Marlin<{a_type}l, 1125899906843648l, {a_type}l, {a_type}l, "
        f"128, 4, 4, 8, false, {stages}, 8, false>(int4 const*, int4 const*, int4*)"
    )


def entry(label: str, container: int = 0) -> Entry:
    kind = "sass" if label.startswith("sm_") else "ptx"
    num = label.split("_")[1]
    suffix = num[-1] if num[-1] in "af" else ""
    sm = int(num.rstrip("af"))
    return Entry(
        section=".nv_fatbin",
        container=container,
        kind=kind,
        arch=label,
        sm=sm,
        suffix=suffix,
        ptx_isa="9.0" if kind == "ptx" else None,
        loadable=True,
        size=100,
    )


def record(path: str, kernels: dict[str, list[str]] | None, labels: list[str] | None = None) -> FileRecord:
    if labels is None:
        labels = sorted({c for codes in (kernels or {}).values() for c in codes})
    ki = None if kernels is None else [KernelInfo(name=n, mangled=n, codes=c) for n, c in kernels.items()]
    return FileRecord(path=path, kind="elf", entries=[entry(x, i) for i, x in enumerate(labels)], kernels=ki)


def cell(cells, backend: str, target: str, variant: str | None = None):
    got = [
        c
        for c in cells
        if c.backend == backend and c.target == target and (variant is None or c.variant == variant)
    ]
    assert got, (backend, target, variant)
    return got[0]


GPUS = catalog().gpus
MOE_C = "/site/vllm/_moe_C_stable_libtorch.abi3.so"
MARLIN_FILE = {
    marlin(BF16, 4): ["sm_80", "sm_120f", "compute_80"],
    marlin(FP16, 4): ["sm_80", "sm_120f", "compute_80"],
    marlin(FP16, 2): ["sm_75"],
    marlin(E4M3, 4): ["sm_89", "sm_120f"],
    "void topk_softmax_kernel<float>(float const*)": [
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_89",
        "sm_90",
        "sm_100",
        "sm_120",
    ],
}


@pytest.fixture(scope="module")
def marlin_cells():
    return backend_view([record(MOE_C, MARLIN_FILE)], GPUS, backends=["marlin"])


@pytest.mark.parametrize(
    ("target", "variant", "verdict"),
    [
        ("sm_90", "bf16 activations", "ptx-jit"),
        ("sm_100", "bf16 activations", "ptx-jit"),
        ("sm_110", "bf16 activations", "ptx-jit"),
        ("sm_120", "bf16 activations", "sass"),
        ("sm_121", "bf16 activations", "sass-compatible"),
        ("sm_80", "bf16 activations", "sass"),
        ("sm_86", "bf16 activations", "sass-compatible"),
        ("sm_87", "bf16 activations", "ptx-jit"),  # Orin: iGPU, no dGPU SASS
        ("sm_75", "bf16 activations", "none"),  # no bf16 Marlin on Turing
        ("sm_75", "fp16 activations", "sass"),  # the 2-stage sm_75 instances
        ("sm_90", "fp16 activations", "ptx-jit"),
        ("sm_89", "fp8 activations (W4A8-FP8)", "sass"),
        ("sm_90", "fp8 activations (W4A8-FP8)", "none"),
    ],
)
def test_marlin_per_kernel(marlin_cells, target, variant, verdict):
    c = cell(marlin_cells, "moe.marlin", target, variant)
    assert c.verdict == verdict, c.reason


def test_marlin_reason_names_the_kernel(marlin_cells):
    c = cell(marlin_cells, "moe.marlin", "sm_90", "bf16 activations")
    req = c.requirements[0]
    assert "marlin_moe_wna16::Marlin<1125899906909960l" in req.reason
    assert req.via == "compute_80" and req.min_driver == "13.0"
    assert req.evidence and req.evidence[0]["verdict"] == "ptx-jit"


def test_fp8_gate_even_with_code(marlin_cells):
    # sm_121 has 120f code for fp8 Marlin and vLLM allows 12.x
    fp8 = "fp8 activations (W4A8-FP8)"
    assert cell(marlin_cells, "moe.marlin", "sm_121", fp8).verdict == "sass-compatible"
    c = cell(marlin_cells, "moe.marlin", "sm_87", "fp8 activations (W4A8-FP8)")
    assert c.verdict == "none" and not c.gate_ok


def test_old_file_name_alternative():
    cells = backend_view(
        [record("/site/vllm/_moe_C.abi3.so", MARLIN_FILE)], [parse_target("sm_120")], backends=["marlin"]
    )
    assert cell(cells, "moe.marlin", "sm_120", "bf16 activations").verdict == "sass"


def test_wheel_member_paths_match():
    so = "vllm/_moe_C_stable_libtorch.abi3.so"
    assert path_matches(f"/w/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl!{so}", so)
    assert not path_matches(f"/w/x.whl!not{so}", so)
    assert path_matches(
        "/s/flashinfer_cubin/cubins/abc/batched_gemm-1-2/Bmm_a_sm100f.cubin",
        "cubins/*/batched_gemm-*/Bmm_*.cubin",
    )
    assert not path_matches(
        "/s/cubins/abc/def/batched_gemm-1-2/Bmm_a.cubin", "cubins/*/batched_gemm-*/Bmm_*.cubin"
    )


def test_nothing_installed():
    cells = backend_view([], [parse_target("sm_90")])
    assert cell(cells, "moe.marlin", "sm_90").verdict == "not-installed"
    reason = cell(cells, "moe.marlin", "sm_90").reason
    assert "no vllm/_moe_C_stable_libtorch.abi3.so or vllm/_moe_C.abi3.so" in reason
    assert cell(cells, "moe.triton", "sm_90").verdict == "pure"
    assert cell(cells, "moe.flashinfer_cutlass", "sm_90").verdict == "jit"
    assert cell(cells, "moe.deep_gemm", "sm_90").verdict == "not-installed"  # host module missing


def test_unreadable_file_counts_as_not_installed():
    broken = FileRecord(path=MOE_C, error="truncated ELF")
    c = cell(backend_view([broken], [parse_target("sm_90")], backends=["marlin"]), "moe.marlin", "sm_90")
    assert c.verdict == "not-installed" and "1 unreadable" in c.reason


FA3 = "/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"


def test_fa3_gate_and_code():
    name = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<x>>>()"
    rec = record(FA3, {name: ["sm_90a"]})
    gpus = [parse_target(t) for t in ("sm_90", "sm_100", "sm_110", "sm_120")]
    cells = backend_view([rec], gpus, backends=["attention.flash_attn.fa3"])
    assert cell(cells, "attention.flash_attn.fa3", "sm_90").verdict == "sass"
    for t in ("sm_100", "sm_110", "sm_120"):
        c = cell(cells, "attention.flash_attn.fa3", t)
        assert c.verdict == "none" and c.code_verdict == "none" and not c.gate_ok


def test_gate_refuses_even_when_code_loads():
    rec = record(FA3, {"flash::FlashAttnFwdSm90<y>": ["sm_90a", "sm_100f"]})
    c = cell(
        backend_view([rec], [parse_target("sm_100")], backends=["attention.flash_attn.fa3"]),
        "attention.flash_attn.fa3",
        "sm_100",
    )
    assert (c.verdict, c.code_verdict, c.gate_ok) == ("none", "sass", False)
    assert "9.x" in c.reason
    rows = backend_table([rec], [parse_target("sm_100")], backends=["attention.flash_attn.fa3"])
    assert rows[0]["sm_100"] == "none (gate)"


def test_missing_kernel_pattern_is_none():
    rec = record(FA3, {"void some_other_kernel()": ["sm_90a"]})
    c = cell(
        backend_view([rec], [parse_target("sm_90")], backends=["attention.flash_attn.fa3"]),
        "attention.flash_attn.fa3",
        "sm_90",
    )
    assert c.verdict == "none" and "no kernel matching /FlashAttnFwdSm90/" in c.reason


def test_file_level_fallback_without_kernel_names():
    rec = record(FA3, None, labels=["sm_90a"])
    c = cell(
        backend_view([rec], [parse_target("sm_90")], backends=["attention.flash_attn.fa3"]),
        "attention.flash_attn.fa3",
        "sm_90",
    )
    assert c.verdict == "sass" and c.requirements[0].file_level and "--kernels" in c.reason


CUBINS = "/site/flashinfer_cubin/cubins/d2c5/batched_gemm-91e0ba0-896b90b"


def _cubin(name: str, label: str) -> FileRecord:
    rec = record(f"{CUBINS}/{name}.cubin", {name.lower(): [label]})
    rec.kind = "cubin"
    return rec


def test_trtllm_cubin_menu_any_and_jit_launcher():
    recs = [_cubin("Bmm_E2m1_t128_sm100f", "sm_100f"), _cubin("Bmm_E2m1_t128_sm103a", "sm_103a")]
    gpus = [parse_target(t) for t in ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121")]
    cells = backend_view(recs, gpus, backends=["flashinfer_trtllm"])
    c100 = cell(cells, "moe.flashinfer_trtllm", "sm_100")
    assert c100.requirements[0].verdict == "sass"
    assert c100.requirements[1].verdict == "jit"  # launcher fused_moe_trtllm_sm100 not prebuilt
    assert c100.verdict == "jit"  # weakest link
    assert cell(cells, "moe.flashinfer_trtllm", "sm_103").requirements[0].verdict == "sass"
    for t in ("sm_110", "sm_120", "sm_121"):
        c = cell(cells, "moe.flashinfer_trtllm", t)
        assert c.verdict == "none" and c.requirements[0].verdict == "none"


def test_jit_module_found_in_cache():
    so = "/root/.cache/flashinfer/0.7.2/120f/cached_ops/fused_moe_120/fused_moe_120.so"
    rec = record(so, None, labels=["sm_120f"])
    gpus = [parse_target(t) for t in ("sm_90", "sm_120", "sm_121")]
    cells = backend_view([rec], gpus, backends=["flashinfer_cutlass"])
    assert cell(cells, "moe.flashinfer_cutlass", "sm_120").verdict == "sass"
    assert cell(cells, "moe.flashinfer_cutlass", "sm_121").verdict == "sass-compatible"
    c90 = cell(cells, "moe.flashinfer_cutlass", "sm_90")
    assert c90.verdict == "jit" and "none loadable on sm_90" in c90.reason


def test_renderers_and_json():
    report = ScanReport(probe_version="t", files=[record(MOE_C, MARLIN_FILE)])
    gpus = [parse_target("sm_90"), parse_target("sm_120")]
    rows = backend_table(report, gpus)
    assert rows[0] == {
        "kind": "moe",
        "backend": "marlin [bf16 activations]",
        "sm_90": "ptx-jit",
        "sm_120": "sass",
    }
    assert set(rows[0]) == {"kind", "backend", "sm_90", "sm_120"}
    assert "marlin [bf16 activations]" in render_table(rows)
    assert render_markdown(rows).startswith("| kind")
    doc = json.loads(json.dumps(backends_json(report, gpus)))
    assert doc["schema_version"] == 1 and doc["verdicts"][0] == "sass"
    assert {c["verdict"] for c in doc["cells"]} <= set(RANK)
    assert len(doc["cells"]) == sum(len(b.scan.variants) for b in backend_catalog().scanned()) * 2


def test_file_level_verdicts_are_starred_in_the_table():
    # without kernel names the whole _moe_C file (sm_90 SASS for other kernels) would hide that
    # Marlin MoE has only compute_80 PTX for sm_90: the table flags such verdicts
    labels = sorted({c for codes in MARLIN_FILE.values() for c in codes})
    rows = backend_table([record(MOE_C, None, labels=labels)], [parse_target("sm_90")], backends=["marlin"])
    assert rows[0]["sm_90"] == "sass*"
    rows = backend_table([record(MOE_C, MARLIN_FILE)], [parse_target("sm_90")], backends=["marlin"])
    assert rows[0]["sm_90"] == "ptx-jit"
