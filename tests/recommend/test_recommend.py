"""probe recommend: evidence-based choice, flags by vLLM version, fallback, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.matrix.build import build_matrix, write_matrix
from probe.recommend.recommender import recommend
from probe.recommend.spelling import spell_flags
from tests.matrix import fixtures

ROOT = Path(__file__).resolve().parents[2]


def test_measured_engine_pair(data_dir, probe_cli):
    r = probe_cli("recommend", "--model", "122b", "--matrix", str(data_dir / "baseline.json"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {
        "model",
        "gpu",
        "moe_backend",
        "attention_backend",
        "flags",
        "env",
        "evidence",
        "warnings",
    } <= out.keys()
    assert (out["model"], out["gpu"], out["basis"]) == ("Qwen3.5-122B-A10B", "sm_110", "measured")
    assert out["flags"] == ["--moe-backend", "cutlass", "--attention-backend", "TRITON_ATTN"]
    assert out["env"] == {}  # vLLM 0.26.0 reads no MoE / attention env var any more
    used = [e for e in out["evidence"] if e["role"] != "ruled_out"]
    assert used and all(e["outcome"] == "ok" and e["source"] == "measured" for e in used)
    ruled = {e["id"] for e in out["evidence"] if e["role"] == "ruled_out"}
    assert "moe/marlin/nvfp4/E=256/H=3072/I=1024/tp=1" in ruled
    assert any("FA3" in w for w in out["warnings"])


def test_kernel_level_pair_with_fa_version_and_ratio(data_dir, probe_cli):
    r = probe_cli("recommend", "--model", "35b", "--matrix", str(data_dir / "baseline.json"))
    assert r.returncode == 0, r.stderr
    assert (
        "--moe-backend marlin --attention-backend FLASH_ATTN --attention-config '{\"flash_attn_version\": 2}'"
    ) in r.stdout
    assert "runner-up: " in r.stdout and "x slower" in r.stdout and "measured on this GPU" in r.stdout


def test_never_wrong_output(tmp_path):
    rs = fixtures.results("baseline")
    fast_but_wrong = rs[5].model_copy(update={"outcome": "wrong_output", "timings": {"forward_ms_b1": 0.01}})
    rs[5] = fast_but_wrong  # cutlass @ 35b shape: fastest, but garbage
    m = build_matrix(rs, provenance=fixtures.matrix("baseline").provenance.model_dump(), static=None)
    write_matrix(m, tmp_path / "m.json")
    out = recommend("35b", matrices=[tmp_path / "m.json"])
    assert out.moe_backend == "marlin"


def test_fallback_says_so(tmp_path, probe_cli):
    empty = tmp_path / "none"
    empty.mkdir()
    r = probe_cli("recommend", "--model", "122b", "--gpu", "sm_110a", "--matrix", str(empty), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["basis"] == "predicted+reported"
    assert any("No measured matrix for sm_110" in n for n in out["notes"])
    assert (out["moe_backend"], out["attention_backend"]) == (
        "cutlass",
        "TRITON_ATTN",
    )  # the Thor field report
    assert all(e["source"] == "reported" for e in out["evidence"] if e["role"] != "ruled_out")
    assert any(e["citation"] for e in out["evidence"])


def test_no_gpu_and_no_measurement_is_usage_error(tmp_path, probe_cli):
    r = probe_cli("recommend", "--model", "122b", "--matrix", str(tmp_path))
    assert r.returncode == 2 and "--gpu" in r.stderr


def test_unknown_model(probe_cli, data_dir):
    r = probe_cli("recommend", "--model", "qwen3.5-12b", "--matrix", str(data_dir / "baseline.json"))
    assert r.returncode == 2
    assert "did you mean" in r.stderr and "Traceback" not in r.stderr


def test_no_working_pair_exit_3(data_dir, probe_cli):
    r = probe_cli("recommend", "--model", "122b", "--matrix", str(data_dir / "current-regression.json"))
    assert r.returncode == 3
    assert "no working" in r.stdout


@pytest.mark.parametrize(
    ("vllm", "moe", "attn", "fa", "quant", "flags", "env"),
    [
        (
            "0.33.0",
            "cutlass",
            "TRITON_ATTN",
            None,
            "nvfp4",
            ["--moe-backend", "cutlass", "--attention-backend", "TRITON_ATTN"],
            {},
        ),
        (
            "0.20.2",
            "marlin",
            "TRITON_ATTN",
            None,
            "nvfp4",
            ["--moe-backend", "marlin", "--attention-backend", "TRITON_ATTN"],
            {"VLLM_USE_FLASHINFER_MOE_FP4": "0"},
        ),
        (
            "0.16.0",
            "flashinfer_cutlass",
            "FLASH_ATTN",
            2,
            "nvfp4",
            ["--attention-backend", "FLASH_ATTN", "--attention-config", '{"flash_attn_version": 2}'],
            {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "VLLM_FLASHINFER_MOE_BACKEND": "throughput"},
        ),
        (
            "0.12.0",
            "marlin",
            "FLASHINFER",
            None,
            "nvfp4",
            [],
            {
                "VLLM_USE_FLASHINFER_MOE_FP4": "0",
                "VLLM_TEST_FORCE_FP8_MARLIN": "1",
                "VLLM_ATTENTION_BACKEND": "FLASHINFER",
            },
        ),
        (
            "0.11.0",
            None,
            "FLASH_ATTN",
            3,
            "bf16",
            [],
            {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_FLASH_ATTN_VERSION": "3"},
        ),
    ],
)
def test_flags_by_vllm_version(vllm, moe, attn, fa, quant, flags, env):
    got_flags, got_env, _ = spell_flags(moe, attn, fa, quant, vllm)
    assert (got_flags, got_env) == (flags, env)


def test_fa4_needs_0_18(monkeypatch):
    _, _, warnings = spell_flags(None, "FLASH_ATTN", 4, "bf16", "0.16.0")
    assert any("FlashAttention 4" in w for w in warnings)


STATIC = (
    sorted((ROOT / "matrices" / "static").glob("*.json")) if (ROOT / "matrices" / "static").is_dir() else []
)


@pytest.mark.skipif(not STATIC, reason="no static predictions published under matrices/static/ yet")
def test_published_static_predictions_answer(probe_cli):
    r = probe_cli("recommend", "--model", "397b", "--gpu", "sm_120", "--json")  # default: ./matrices
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["basis"] == "predicted+reported"
    assert any(str(STATIC[0]) in str(m) or m.endswith(STATIC[0].name) for m in out["matrices"])
    assert (
        out["moe_backend"] == "marlin"
    )  # the RTX PRO 6000 field report's winner; cutlass gave garbage there
    assert any(e["source"] == "predicted" for e in out["evidence"])
    ruled = {e["id"]: e for e in out["evidence"] if e["role"] == "ruled_out"}
    assert ruled["reported/sm_120/moe/cutlass/Qwen3.5-397B-A17B/tp4"]["outcome"] == "wrong_output"


def _gdn_matrix(tmp_path: Path, with_variant: bool) -> Path:
    """The baseline, but its Qwen3.5 engine run failed the way vLLM 0.26 fails on an image without
    FlashInfer (GDN prefill picks FlashInfer on 'auto'), optionally with the Triton-GDN variant ok."""
    from probe.cells import CellResult
    from probe.outcomes import Outcome

    rs = [r for r in fixtures.results("baseline") if r.kind != "engine"]
    base = {
        "model": "Qwen3.5-122B-A10B",
        "moe_backend": "cutlass",
        "attention_backend": "TRITON_ATTN",
        "quant": "nvfp4",
    }
    rs.append(
        CellResult(
            id="engine/Qwen3.5-122B-A10B/cutlass+TRITON_ATTN",
            kind="engine",
            params=base,
            outcome=Outcome.IMPORT_ERROR,
            phase="generate",
            root_cause="ModuleNotFoundError: No module named 'flashinfer'",
        )
    )
    if with_variant:
        rs.append(
            CellResult(
                id="engine/Qwen3.5-122B-A10B/cutlass+TRITON_ATTN/gdn_prefill_backend=triton",
                kind="engine",
                params={**base, "engine_args": {"gdn_prefill_backend": "triton"}},
                outcome=Outcome.OK,
                timings={"tokens_per_s": 30.0},
            )
        )
    m = build_matrix(rs, provenance=fixtures.matrix("baseline").provenance.model_dump(), static=None)
    write_matrix(m, tmp_path / "m.json")
    return tmp_path / "m.json"


def test_engine_args_of_the_working_run_become_flags(tmp_path):
    out = recommend("122b", matrices=[_gdn_matrix(tmp_path, with_variant=True)])
    assert (out.moe_backend, out.attention_backend) == ("cutlass", "TRITON_ATTN")
    assert out.engine_args == {"gdn_prefill_backend": "triton"}
    assert out.flags[-2:] == ["--gdn-prefill-backend", "triton"]
    ruled = {e["id"] for e in out.evidence if e["role"] == "ruled_out"}
    # the run without the argument died importing flashinfer in an image that lacked it: another image's
    # missing package (no image was asked about), not a failure of the pair here
    assert "engine/Qwen3.5-122B-A10B/cutlass+TRITON_ATTN" not in ruled
    assert not any("every engine run" in w for w in out.warnings)


def test_every_engine_run_failed_is_said(tmp_path):
    out = recommend("122b", matrices=[_gdn_matrix(tmp_path, with_variant=False)])
    assert "--gdn-prefill-backend" not in out.flags
    warn = [w for w in out.warnings if "every engine run of Qwen3.5-122B-A10B" in w]
    assert warn and "No module named 'flashinfer'" in warn[0]


def test_runner_up_label_names_fa_version_and_engine_args():
    from probe.cli.recommend import _pair_label

    assert _pair_label({"moe_backend": "marlin", "attention_backend": "FLASH_ATTN", "fa_version": 2}) == (
        "marlin + FLASH_ATTN (FA2)"
    )
    gdn = {"gdn_prefill_backend": "triton"}
    got = _pair_label({"moe_backend": None, "attention_backend": "TRITON_ATTN", "engine_args": gdn})
    assert got == "- + TRITON_ATTN, gdn_prefill_backend=triton"


def test_text_view_lists_each_ruled_out_backend_once_with_its_reason(probe_cli):
    """The published matrices rule out many cells for 122b; the text names each backend once, with the
    strongest reason (with -v: every backend, and where it was read; JSON: ``ruled_out``, and every cell
    in ``evidence``). An image's missing flashinfer is not a reason (it is that image's)."""
    matrices = str(ROOT / "matrices" / "measured")
    r = probe_cli("recommend", "--model", "122b", "--matrix", matrices, "-v")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    section = lines[lines.index("ruled out:") + 1 :]
    ruled = section[: next((i for i, line in enumerate(section) if not line.startswith("  ")), len(section))]
    backends = [line.split()[:2] for line in ruled]
    assert ruled and len(backends) == len({tuple(b) for b in backends})  # one line per backend
    assert not any("No module named 'flashinfer'" in line for line in ruled)
    assert all("[" in line and line.rstrip().endswith("]") for line in ruled)  # each says where from
    assert "--gdn-prefill-backend triton" in r.stdout
    j = json.loads(probe_cli("recommend", "--model", "122b", "--matrix", matrices, "--json").stdout)
    assert len(j["ruled_out"]) == len(ruled)
    assert sum(e["role"] == "ruled_out" for e in j["evidence"]) > len(ruled)
    short = probe_cli("recommend", "--model", "122b", "--matrix", matrices).stdout
    assert len(short.splitlines()) <= 30 and not any("aiter" in line for line in short.splitlines())
