"""Pick the fastest working MoE x attention pair for a model on a GPU, from the evidence.

This module is the fast path of ``probe recommend`` (≤ 0.2 s as a whole process): it reads the
matrices as plain JSON and checks them with light structural tests, without pydantic. ``show`` /
``gate`` / ``diff`` validate the same files fully with ``probe.matrix.schema``.

Evidence order: ``measured`` cells for the GPU when any exist (field reports only add warnings);
otherwise static predictions plus field reports (``reported`` cells), and the answer says so.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from probe.catalog import _model_index
from probe.errors import BadInputError, UsageError
from probe.matrix._static import is_static_predictions, predicted_cell_dicts
from probe.outcomes import Outcome

log = logging.getLogger(__name__)

_OUTCOMES = {o.value for o in Outcome}
_FAILED = {o.value for o in Outcome if o.failed}
_EVIDENCE_RANK = {"measured": 3, "reported": 2, "predicted": 1}


# ------------------------------------------------------------------ versions / data


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not m:
        return None
    return tuple(int(x or 0) for x in m.groups())


def _data(name: str) -> Any:
    return json.loads(resources.files("probe.data").joinpath(name).read_text(encoding="utf-8"))


def flags_data() -> dict[str, Any]:
    return _data("vllm_flags.json")


def reported_cells() -> list[dict[str, Any]]:
    doc = _data("reported.json")
    cells = []
    for c in doc.get("cells", []):
        c = dict(c)
        c["_source"] = "probe/data/reported.json"
        c["_vllm"] = c.get("vllm_version")
        cells.append(c)
    return cells


def parse_gpu(text: str) -> tuple[int, str]:
    """(sm, display name) for ``sm_110a`` / ``11.0`` / ``110`` / ``thor`` / ``H100`` (no pydantic)."""
    key = text.strip().lower().replace(" ", "")
    gpus = _data("gpus.json")["gpus"]
    sm: int | None = None
    if m := re.match(r"^(?:sm_?|compute_?)?(\d{2,3})[af]?$", key):
        sm = int(m.group(1))
    elif m := re.match(r"^(\d{1,2})\.(\d)[af]?$", key):
        sm = int(m.group(1)) * 10 + int(m.group(2))
    if sm is not None:
        entry = next((g for g in gpus if g["sm"] == sm), None)
        return sm, (entry["names"][0] if entry else f"sm_{sm}")
    for g in gpus:
        names = {n.lower().replace(" ", "") for n in g["names"]} | {a.lower() for a in g.get("aliases", [])}
        if key in names:
            return int(g["sm"]), g["names"][0]
    known = ", ".join(f"sm_{g['sm']}" for g in gpus)
    raise UsageError(
        f"unknown GPU {text!r}", hint=f"use a compute capability such as sm_110a or 12.0; known: {known}"
    )


# ------------------------------------------------------------------ loading matrices


def default_matrix_paths() -> list[Path]:
    """``$PROBE_MATRICES`` (os.pathsep-separated), else ./matrices, else the checkout's matrices/."""
    env = os.environ.get("PROBE_MATRICES")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    cwd = Path.cwd() / "matrices"
    if cwd.is_dir():
        return [cwd]
    repo = Path(__file__).resolve().parent.parent.parent / "matrices"
    return [repo] if repo.is_dir() else []


def _json_files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(x for x in p.rglob("*.json") if x.is_file()))
        elif p.is_file():
            files.append(p)
        else:
            raise UsageError(f"{p}: no such matrix file or folder")
    return files


def _check_cells(cells: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(cells, list):
        raise BadInputError(f"{path}: 'cells' must be a list")
    seen: set[str] = set()
    for c in cells:
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            raise BadInputError(f"{path}: every cell needs an 'id'")
        if c["id"] in seen:
            raise BadInputError(f"{path}: duplicate cell id {c['id']!r}")
        seen.add(c["id"])
        if c.get("outcome") not in _OUTCOMES:
            raise BadInputError(
                f"{path}: cell {c['id']!r} has outcome {c.get('outcome')!r}, "
                f"not one of {', '.join(sorted(_OUTCOMES))}"
            )
        if c.get("evidence", "measured") == "reported" and not c.get("citation"):
            raise BadInputError(f"{path}: reported cell {c['id']!r} has no citation")
    return cells


def _matrix_cells(doc: dict[str, Any], path: Path, only_sm: int | None = None) -> list[dict[str, Any]]:
    prov = doc.get("provenance") or {}
    if not isinstance(prov, dict):
        raise BadInputError(f"{path}: 'provenance' must be an object")
    gpu = prov.get("gpu") or {}
    sm = gpu.get("sm") if isinstance(gpu, dict) else None
    if only_sm is not None and sm is not None and sm != only_sm and not doc.get("static"):
        # measured on another GPU and no static section: nothing here concerns the asked GPU
        return []
    vllm = (prov.get("versions") or {}).get("vllm")
    static = doc.get("static") or {}
    static_vllm = (static.get("packages") or {}).get("vllm") if isinstance(static, dict) else None
    out = []
    cells = _check_cells(doc.get("cells", []), path)
    has_predicted = any(c.get("evidence") == "predicted" for c in cells)
    if isinstance(static, dict) and static and not has_predicted:
        cells = cells + predicted_cell_dicts(static)
    for c in cells:
        c = dict(c)
        ev = c.get("evidence", "measured")
        c["evidence"] = ev
        if ev == "measured":
            if sm is not None and c.get("gpu_sm") not in (None, sm):
                raise BadInputError(
                    f"{path}: measured cell {c['id']!r} is for sm_{c['gpu_sm']} but the "
                    f"provenance GPU is sm_{sm}"
                )
            c["gpu_sm"] = sm
        c["_source"] = str(path)
        c["_vllm"] = c.get("vllm_version") or (vllm if ev == "measured" else None) or static_vllm or vllm
        c["_gpu_name"] = gpu.get("name") if isinstance(gpu, dict) else None
        out.append(c)
    return out


def _single_gpu_cuda(info: dict[str, Any]) -> bool:
    """A backend a single NVIDIA GPU can use (not ROCm-only, not an expert-parallel megakernel)."""
    return info.get("platform", "cuda") == "cuda" and not info.get("expert_parallel_only")


def load_cells(
    paths: Iterable[Path], only_sm: int | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """All cells of all matrix / fleet files under ``paths`` plus the packaged field reports.

    With ``only_sm``, matrices measured on another GPU (and holding no static section) are skipped.
    """
    cells: list[dict[str, Any]] = []
    used: list[str] = []
    for f in _json_files(paths):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInputError(f"{f}: not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise BadInputError(f"{f}: a matrix file holds a JSON object")
        if is_static_predictions(doc):
            # a raw `probe scan` table published next to the matrices
            pk = doc.get("packages") or doc.get("backend_catalog_reference") or {}
            vm = re.match(r"^\s*(\d+\.\d+\.\d+)", str(pk.get("vllm") or "")) if isinstance(pk, dict) else None
            for c in predicted_cell_dicts(doc):
                c["_source"], c["_vllm"] = str(f), vm.group(1) if vm else None
                cells.append(c)
            used.append(str(f))
            continue
        if "schema_version" not in doc:
            log.debug("%s: not a matrix, skipped", f)
            continue
        if doc.get("schema_version") != 1:
            raise BadInputError(
                f"{f}: schema_version {doc.get('schema_version')!r} is not supported (expected 1)"
            )
        kind = doc.get("kind", "matrix")
        members = doc.get("matrices", []) if kind == "fleet" else [doc]
        if kind not in ("matrix", "fleet") or not isinstance(members, list):
            raise BadInputError(f"{f}: unknown document kind {kind!r}")
        for m in members:
            cells.extend(_matrix_cells(m, f, only_sm))
        used.append(str(f))
    cells.extend(reported_cells())
    return cells, used


# ------------------------------------------------------------------ selection


class Profile:
    """The model facts ``recommend`` needs (a plain class: no pydantic / dataclasses on the fast path)."""

    def __init__(
        self,
        *,
        name: str,
        quant: str,
        experts: int | None,
        hidden: int,
        moe_hidden: int | None,
        intermediate: int | None,
        heads: int,
        kv_heads: int,
        head_dim: int,
        moe_layers: int,
        attention_layers: int,
        names: set[str],
        mla: bool = False,
    ) -> None:
        self.name, self.quant, self.experts, self.hidden = name, quant, experts, hidden
        self.moe_hidden, self.intermediate, self.heads, self.kv_heads = (
            moe_hidden,
            intermediate,
            heads,
            kv_heads,
        )
        self.head_dim, self.moe_layers, self.attention_layers = head_dim, moe_layers, attention_layers
        self.names, self.mla = names, mla

    @classmethod
    def from_text(cls, text: str, quant: str | None) -> Profile:
        hit = _model_index.find(text)
        if hit is not None:
            data, q = hit
            moe = data.get("moe") or {}
            return cls(
                name=data["name"],
                quant=quant or q or data["quant"],
                experts=moe.get("experts"),
                hidden=data["hidden_size"],
                moe_hidden=moe.get("latent_size") or data["hidden_size"],
                intermediate=moe.get("intermediate"),
                heads=data["num_attention_heads"],
                kv_heads=data["num_key_value_heads"],
                head_dim=data["head_dim"],
                moe_layers=moe.get("moe_layers") or (data["num_hidden_layers"] if moe else 0),
                attention_layers=data["attention_layers"],
                names={_model_index.norm(n) for n in _model_index.profile_names(data)},
                mla=bool(data.get("mla")),
            )
        from probe.catalog.models import resolve_model  # config.json / HF cache: the full loader

        p = resolve_model(text)
        return cls(
            name=p.name,
            quant=quant or p.quant,
            experts=p.moe.experts if p.moe else None,
            hidden=p.hidden_size,
            moe_hidden=(p.moe.latent_size or p.hidden_size) if p.moe else None,
            intermediate=p.moe.intermediate if p.moe else None,
            heads=p.num_attention_heads,
            kv_heads=p.num_key_value_heads,
            head_dim=p.head_dim,
            moe_layers=(p.moe.moe_layers or p.num_hidden_layers) if p.moe else 0,
            attention_layers=p.attention_layers,
            names={_model_index.norm(n) for n in p.names()},
            mla=p.mla is not None,
        )

    def is_model(self, name: Any) -> bool:
        return isinstance(name, str) and _model_index.norm(name) in self.names


def _tps(p: Profile) -> dict[int, int]:
    if not p.intermediate:
        return {}
    return {p.intermediate // tp: tp for tp in (1, 2, 4, 8, 16) if p.intermediate % tp == 0}


def _quant_ok(cell_quant: Any, quant: str) -> bool:
    return cell_quant in (None, "") or cell_quant == quant


def _moe_relevant(c: dict[str, Any], p: Profile, tp: int | None, flags: dict[str, Any]) -> bool:
    if c.get("kind") == "engine" and c.get("moe_backend") and not c.get("attention_backend") and p.experts:
        return _engine_relevant(c, p, tp)  # an end-to-end run that names only the MoE backend
    if c.get("kind") != "moe" or not p.experts:
        return False
    if c.get("model") and not p.is_model(c["model"]):
        return False
    if c["evidence"] == "predicted":
        info = flags["moe_backends"].get(str(c.get("backend")))
        if info is None or p.quant not in info["quants"] or not _single_gpu_cuda(info):
            return False
        floor = (info.get("min_sm") or {}).get(p.quant)
        return floor is None or (c.get("gpu_sm") or 0) >= floor
    if not _quant_ok(c.get("quant"), p.quant):
        return False
    if c.get("experts") is None and not c.get("model"):
        return True  # a shape-free fact (e.g. "triton is rejected for NVFP4")
    if c.get("model") and c.get("experts") is None:
        return True
    if c.get("experts") != p.experts or c.get("hidden") not in (p.moe_hidden, p.hidden):
        return False
    shard_tp = _tps(p).get(c.get("intermediate"))  # type: ignore[arg-type]
    return shard_tp is not None and (tp is None or shard_tp == tp)


def _attn_relevant(c: dict[str, Any], p: Profile, tp: int | None) -> bool:
    if c.get("kind") != "attention":
        return False
    backend = str(c.get("attention_backend") or c.get("backend") or "")
    if ("MLA" in backend.upper()) != p.mla:
        return False
    if c.get("head_dim") is not None:  # the kernel cares about the head size; head counts vary by TP
        return bool(c["head_dim"] == p.head_dim)
    if c.get("model"):
        return p.is_model(c["model"])
    return True


def _engine_relevant(c: dict[str, Any], p: Profile, tp: int | None) -> bool:
    return (
        c.get("kind") == "engine"
        and p.is_model(c.get("model"))
        and _quant_ok(c.get("quant"), p.quant)
        and (tp is None or c.get("tp") in (None, tp))
    )


def _ok(c: dict[str, Any]) -> bool:
    return c.get("outcome") == "ok"


class Choice:
    """One backend (and FA version) with the cells that say it works / fails at this shape."""

    def __init__(
        self,
        backend: str,
        fa_version: int | None,
        ok_cells: list[dict[str, Any]],
        bad_cells: list[dict[str, Any]],
        ms: float | None,
        tps: float | None = None,
    ) -> None:
        self.backend, self.fa_version, self.ok_cells, self.bad_cells = (
            backend,
            fa_version,
            ok_cells,
            bad_cells,
        )
        self.ms, self.tps = ms, tps

    @property
    def rank(self) -> tuple[int, int]:
        best = max((_EVIDENCE_RANK[c["evidence"]] for c in self.ok_cells), default=0)
        clean = 0 if any(c.get("degraded") for c in self.ok_cells) else 1
        return best, clean


def _choices(cells: list[dict[str, Any]], key: str, metric: str, basis: str) -> list[Choice]:
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for c in cells:
        b = c.get(key) or c.get("backend")
        if not b:
            continue
        fa = c.get("fa_version") if key == "attention_backend" else None
        groups.setdefault((str(b), fa), []).append(c)
    # an FA-version-less failure of FLASH_ATTN does not condemn a specific FA version that worked
    out = []
    for (b, fa), group in groups.items():
        if fa is None and key == "attention_backend" and any(k[0] == b and k[1] is not None for k in groups):
            continue
        ok = [c for c in group if _ok(c) and (basis == "fallback" or c["evidence"] == "measured")]
        bad = [c for c in group if c.get("outcome") in _FAILED]
        if key == "attention_backend" and fa is not None:
            bad += [c for c in groups.get((b, None), []) if c.get("outcome") in _FAILED]
            ok += [
                c
                for c in groups.get((b, None), [])
                if _ok(c) and c["evidence"] == "predicted" and basis == "fallback"
            ]
        if not ok:
            continue
        if any(c.get("outcome") == "wrong_output" for c in bad):
            continue
        measured_bad = any(c["evidence"] == "measured" for c in bad)
        if basis == "measured" and measured_bad and not any(c["evidence"] == "measured" for c in ok):
            continue  # a measured failure outweighs anything but a measured success (e.g. at another TP)
        if basis == "fallback" and any(c["evidence"] == "reported" for c in bad):
            continue
        times = [
            c["timings"][metric] for c in ok if isinstance((c.get("timings") or {}).get(metric), (int, float))
        ]
        tps = [
            c["timings"]["tokens_per_s"]
            for c in ok
            if isinstance((c.get("timings") or {}).get("tokens_per_s"), (int, float))
        ]
        out.append(Choice(b, fa, ok, bad, min(times) if times else None, max(tps) if tps else None))
    return out


def _ev(c: dict[str, Any], role: str) -> dict[str, Any]:
    return {
        "role": role,
        "id": c["id"],
        "outcome": c["outcome"],
        "source": c["evidence"],
        "file": c.get("_source"),
        "citation": c.get("citation"),
        "root_cause": c.get("root_cause"),
        "degraded": bool(c.get("degraded")),
        "timings": c.get("timings") or {},
    }


def spell_flags(
    moe: str | None, attn: str | None, fa: int | None, quant: str, vllm: str | None
) -> tuple[list[str], dict[str, str], list[str]]:
    """vLLM arguments and environment for a pair, as that vLLM version spells them."""
    fd = flags_data()
    warnings: list[str] = []
    vt = version_tuple(vllm) or version_tuple(fd["latest_known"])
    args: list[str] = []
    env: dict[str, str] = {}

    def since(spec: dict[str, Any]) -> bool:
        return vt >= version_tuple(spec["since"])  # type: ignore[operator]

    def env_read(name: str) -> bool:
        spec = fd["env"].get(name, {})
        until = version_tuple(spec.get("until"))
        start = version_tuple(spec.get("since"))
        return (until is None or vt <= until) and (start is None or vt >= start)  # type: ignore[operator]

    if moe:
        info = fd["moe_backends"].get(moe)
        if since(fd["moe_backend_flag"]):
            if info and vt < version_tuple(info["since"]):  # type: ignore[operator]
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
        if first and vt >= version_tuple(first):  # type: ignore[operator]
            args += [a.format(value=fa) for a in spec["args"]]
        elif env_read("VLLM_FLASH_ATTN_VERSION") and fa in (2, 3):
            env["VLLM_FLASH_ATTN_VERSION"] = str(fa)
        else:
            warnings.append(f"vLLM {vllm} cannot select FlashAttention {fa}")
    return args, env, warnings


def _args_key(engine_args: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (engine_args or {}).items()))


def engine_arg_flags(engine_args: dict[str, Any]) -> list[str]:
    """Extra engine arguments a measured engine cell ran with, spelled as vLLM's CLI reads them
    (``gdn_prefill_backend=triton`` -> ``--gdn-prefill-backend triton``). The cell ran on the vLLM
    version the flags are spelled for, so that version accepted them."""
    out: list[str] = []
    for key, value in sorted(engine_args.items()):
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def recommend(
    model: str,
    *,
    matrices: list[Path] | None = None,
    gpu: str | None = None,
    quant: str | None = None,
    tp: int | None = None,
    loaded: tuple[list[dict[str, Any]], list[str]] | None = None,
) -> dict[str, Any]:
    """The recommendation as a JSON-ready dict (see docs/publish.md for the fields)."""
    fd = flags_data()
    hit = _model_index.find(model)
    if hit is None and not Path(model).expanduser().exists() and "/" not in model:
        close = _model_index.closest_names(model)
        raise UsageError(
            f"unknown model {model!r}",
            hint=(f"did you mean: {', '.join(close)}?" if close else "run `probe models`")
            + " — or pass a config.json / model folder / cached HF id",
        )
    prof = Profile.from_text(model, quant)
    paths = matrices if matrices is not None else default_matrix_paths()
    asked_sm = parse_gpu(gpu)[0] if gpu else None
    cells, used = loaded if loaded is not None else load_cells(paths, asked_sm)
    measured_gpus = sorted({c["gpu_sm"] for c in cells if c["evidence"] == "measured" and c.get("gpu_sm")})
    if gpu:
        sm, gpu_name = parse_gpu(gpu)
    elif len(measured_gpus) == 1:
        sm = measured_gpus[0]
        gpu_name = (
            next((c["_gpu_name"] for c in cells if c.get("gpu_sm") == sm and c.get("_gpu_name")), None)
            or parse_gpu(str(sm))[1]
        )
    elif measured_gpus:
        raise UsageError(
            "the matrices hold measurements for several GPUs: " + ", ".join(f"sm_{s}" for s in measured_gpus),
            hint="pick one with --gpu",
        )
    else:
        raise UsageError(
            "no measured matrix found; say which GPU to predict for with --gpu (e.g. --gpu sm_110a)",
            hint=f"matrices searched: {', '.join(str(p) for p in paths) or '(none)'}",
        )
    mine = [c for c in cells if c.get("gpu_sm") == sm]
    basis = "measured" if any(c["evidence"] == "measured" for c in mine) else "fallback"
    warnings: list[str] = []
    notes: list[str] = []
    if basis == "fallback":
        notes.append(
            f"No measured matrix for sm_{sm}: this answer comes from static predictions and field "
            "reports, not from a run on this GPU. Run `probe run` on the GPU for measured evidence."
        )
    moe_cells = [c for c in mine if _moe_relevant(c, prof, tp, fd)]
    attn_cells = [c for c in mine if _attn_relevant(c, prof, tp)]
    eng_cells = [c for c in mine if _engine_relevant(c, prof, tp)]
    if basis == "measured":
        n_ms = sum(1 for c in moe_cells if c["evidence"] == "measured")
        if prof.experts and n_ms == 0:
            warnings.append(
                f"the measured matrix has no MoE cell at {prof.name}'s shape "
                f"(E={prof.experts}, H={prof.moe_hidden}, I={prof.intermediate}/TP, {prof.quant})"
            )
    moe_choices = _choices(moe_cells, "moe_backend", "forward_ms_b1", basis) if prof.experts else []
    attn_choices = _choices(attn_cells, "attention_backend", "decode_ms", basis)
    result: dict[str, Any] = {
        "model": prof.name,
        "quant": prof.quant,
        "gpu": f"sm_{sm}",
        "gpu_name": gpu_name,
        "basis": "measured" if basis == "measured" else "predicted+reported",
        "moe_backend": None,
        "attention_backend": None,
        "fa_version": None,
        "engine_args": {},
        "vllm_version": None,
        "flags_for_vllm": None,
        "flags": [],
        "env": {},
        "evidence": [],
        "speed": None,
        "runner_up": None,
        "warnings": warnings,
        "notes": notes,
        "matrices": used,
    }
    # 1) engine pairing cells
    pairs: list[dict[str, Any]] = []
    for c in eng_cells:
        if not _ok(c) or not c.get("attention_backend") or (prof.experts and not c.get("moe_backend")):
            continue
        if basis == "measured" and c["evidence"] != "measured":
            continue
        tps = (c.get("timings") or {}).get("tokens_per_s")
        pairs.append(
            {
                "moe": c.get("moe_backend"),
                "attn": c["attention_backend"],
                "fa": c.get("fa_version"),
                "args": dict(c.get("engine_args") or {}),
                "score": float(tps) if isinstance(tps, (int, float)) else None,
                "metric": "tokens_per_s",
                "higher_better": True,
                "cells": [c],
            }
        )
    bad_pairs = {
        (c.get("moe_backend"), c.get("attention_backend"), _args_key(c.get("engine_args")))
        for c in eng_cells
        if c.get("outcome") in _FAILED and (basis == "fallback" or c["evidence"] == "measured")
    }
    pairs = [p for p in pairs if (p["moe"], p["attn"], _args_key(p["args"])) not in bad_pairs]
    measured_eng = [c for c in eng_cells if c["evidence"] == "measured"]
    if measured_eng and not any(_ok(c) for c in measured_eng):
        causes = sorted({f"{c['outcome']}: {(c.get('root_cause') or '?')[:160]}" for c in measured_eng})
        warnings.append(
            f"every engine run of {prof.name} on sm_{sm} failed ({len(measured_eng)} runs): "
            + " | ".join(causes[:3])
            + " — the kernel-level choice below has not been seen to start this model end to end"
        )
    # 2) kernel-level combination
    if not pairs:
        moes: list[Choice | None] = list(moe_choices) if prof.experts else [None]
        for m in moes:
            if m and (m.backend, None, ()) in bad_pairs:
                continue
            for a in attn_choices:
                if m and (m.backend, a.backend, ()) in bad_pairs:
                    continue
                score, higher = None, False
                metric = (
                    "estimated decode ms per token (moe forward_ms_b1 x MoE layers + attention "
                    "decode_ms x attention layers)"
                )
                if (m is None or m.ms is not None) and a.ms is not None:
                    score = (m.ms * prof.moe_layers if m else 0.0) + a.ms * prof.attention_layers
                elif m is not None and m.tps is not None:
                    score, higher, metric = (
                        m.tps,
                        True,
                        "tokens_per_s of end-to-end runs naming the MoE backend",
                    )
                pairs.append(
                    {
                        "moe": m.backend if m else None,
                        "attn": a.backend,
                        "fa": a.fa_version,
                        "args": {},
                        "score": score,
                        "metric": metric,
                        "higher_better": higher,
                        "cells": (m.ok_cells if m else []) + a.ok_cells,
                    }
                )
    if not pairs:
        failed = [c for c in moe_cells + attn_cells + eng_cells if c.get("outcome") in _FAILED]
        result["evidence"] = [_ev(c, "failed") for c in failed[:20]]
        if not (moe_cells or attn_cells or eng_cells):
            warnings.append(f"no evidence at all for {prof.name} on sm_{sm}")
        else:
            warnings.append(
                f"no working {'MoE x attention pair' if prof.experts else 'attention backend'} "
                f"found for {prof.name} ({prof.quant}) on sm_{sm}"
            )
        return result

    last_resort = {k for k, v in fd["moe_backends"].items() if v.get("last_resort")}
    prio = fd.get("auto_priority", {})
    moe_order = prio.get("moe", {}).get(prof.quant, [])
    attn_order = prio.get("attention_mla" if prof.mla else "attention", [])

    def order(seq: list[str], name: Any) -> int:
        return seq.index(name) if name in seq else len(seq)

    def sort_key(p: dict[str, Any]) -> tuple[Any, ...]:
        per_role: dict[str, int] = {}
        for c in p["cells"]:
            role = "attention" if c.get("kind") == "attention" else "moe"
            per_role[role] = max(per_role.get(role, 0), _EVIDENCE_RANK[c["evidence"]])
        ev = min(per_role.values(), default=0)
        best_cells = [
            c
            for c in p["cells"]
            if _EVIDENCE_RANK[c["evidence"]]
            >= per_role["attention" if c.get("kind") == "attention" else "moe"]
        ]
        clean = 0 if any(c.get("degraded") for c in best_cells) else 1
        has = p["score"] is not None
        s = p["score"] if has else 0.0
        return (
            1 if p["moe"] in last_resort else 0,
            -ev,
            -clean,
            0 if has else 1,
            -s if p["higher_better"] else s,
            order(moe_order, p["moe"]),
            order(attn_order, p["attn"]),
            str(p["moe"]),
            p["attn"],
        )

    pairs.sort(key=sort_key)
    best = pairs[0]
    moe_only = best["metric"].startswith("tokens_per_s of end-to-end runs naming the MoE")

    def differs(p: dict[str, Any]) -> bool:
        if moe_only:  # that metric says nothing about the attention backend
            return bool(p["moe"] != best["moe"])
        return (p["moe"], p["attn"], p["fa"], _args_key(p["args"])) != (
            best["moe"], best["attn"], best["fa"], _args_key(best["args"])
        )

    runner = next((p for p in pairs[1:] if differs(p)), None)
    vllm = (
        next((c.get("_vllm") for c in best["cells"] if c.get("_vllm")), None)
        or next((c.get("_vllm") for c in mine if c.get("_vllm") and c["evidence"] == "measured"), None)
        or next((c.get("_vllm") for c in mine if c.get("_vllm") and c["evidence"] == "predicted"), None)
    )
    if not vllm:
        warnings.append(f"no vLLM version recorded; flags are spelled for vLLM {fd['latest_known']}")
    args, env, flag_warn = spell_flags(best["moe"], best["attn"], best["fa"], prof.quant, vllm)
    args += engine_arg_flags(best["args"])
    warnings.extend(flag_warn)
    result.update(
        {
            "moe_backend": best["moe"],
            "attention_backend": best["attn"],
            "fa_version": best["fa"],
            "engine_args": best["args"],
            "vllm_version": vllm,
            "flags_for_vllm": vllm or fd["latest_known"],
            "flags": args,
            "env": env,
        }
    )
    ev = [
        _ev(
            c,
            "moe" if c.get("kind") == "moe" else ("attention" if c.get("kind") == "attention" else "engine"),
        )
        for c in best["cells"]
    ]
    # context: failures of other backends, and field reports that disagree with measurements
    for c in moe_cells + attn_cells + eng_cells:
        if c.get("outcome") in _FAILED and c not in best["cells"]:
            ev.append(_ev(c, "ruled_out"))
    result["evidence"] = ev
    if runner:
        result["runner_up"] = {
            "moe_backend": runner["moe"],
            "attention_backend": runner["attn"],
            "fa_version": runner["fa"],
            "engine_args": runner["args"],
        }
        if best["score"] is not None and runner["score"] is not None and best["metric"] == runner["metric"]:
            ratio = (
                (best["score"] / runner["score"])
                if best["higher_better"]
                else (runner["score"] / best["score"])
            )
            result["speed"] = {
                "metric": best["metric"],
                "best": best["score"],
                "runner_up": runner["score"],
                "ratio": round(ratio, 3),
            }
    # warnings from static predictions and reports
    for c in mine:
        if c["evidence"] == "measured":
            continue
        fa_failed = (
            c.get("attention_backend") == "FLASH_ATTN" and c.get("fa_version") and c["outcome"] in _FAILED
        )
        if c["evidence"] == "reported":
            if fa_failed:
                warnings.append(
                    f"FA{c['fa_version']} {c['outcome']} on sm_{sm} in a field report: {c.get('root_cause')}"
                )
            continue
        chosen = (best["moe"] and c.get("moe_backend") == best["moe"]) or (
            c.get("attention_backend") == best["attn"] and c.get("fa_version") in (None, best["fa"])
        )
        if chosen and c["outcome"] in _FAILED:
            warnings.append(
                f"the static scan ({Path(str(c.get('_source'))).name}) predicts {c.get('backend')} "
                f"{c['outcome']} on sm_{sm}: {str(c.get('root_cause'))[:160]} — the evidence above came "
                "from another image; run `probe scan` on yours"
            )
        if (
            best["moe"]
            and c.get("moe_backend") == best["moe"]
            and c.get("details", {}).get("verdict") == "ptx-jit"
        ):
            via = c["details"].get("via")
            warnings.append(
                f"{best['moe']} MoE runs from PTX JIT on this GPU"
                + (f" ({via})" if via else "")
                + ": first start is slower and needs a driver that knows the PTX ISA"
            )
        if fa_failed:
            what = "has no code for" if c["outcome"] == "no_kernel_image" else "cannot run on"
            warnings.append(f"FA{c['fa_version']} {what} sm_{sm}: {c.get('root_cause')}")
    for c in mine:
        same_attn = c.get("attention_backend") == best["attn"] and c.get("fa_version") in (None, best["fa"])
        if (
            c["evidence"] == "reported"
            and c.get("outcome") in _FAILED
            and basis == "measured"
            and (c.get("moe_backend") == best["moe"] or same_attn)
            and (c in moe_cells or c in attn_cells or c in eng_cells)
        ):
            warnings.append(
                f"a field report disagrees: {c.get('backend')} {c['outcome']} "
                f"({c.get('root_cause')}) — {c.get('citation')}"
            )
    for c in mine:
        if (
            c["evidence"] == "reported"
            and c.get("outcome") in _FAILED
            and c.get("model")
            and not prof.is_model(c["model"])
            and c.get("quant") in (None, prof.quant)
            and (
                (best["moe"] and c.get("moe_backend") == best["moe"])
                or c.get("attention_backend") == best["attn"]
            )
        ):
            warnings.append(
                f"on {c['model']} a field report saw {c.get('backend')} {c['outcome']} on sm_{sm} "
                f"({c.get('root_cause')}): probe this model's shape before relying on it"
            )
    for c in best["cells"]:
        for r in c.get("degraded_reasons") or []:
            warnings.append(f"{c.get('backend')}: degraded: {r}")
    result["warnings"] = list(dict.fromkeys(warnings))
    return result
