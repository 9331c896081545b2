"""Field reports as the recommender's evidence: the cells a report gives, to which requests they
apply, and how the answer says so.

A report of the base (:mod:`probe.reports.base`, ``probe/data/reports.json`` + ``--reports`` /
``$PROBE_REPORTS`` files) gives, per GPU it was seen on and only where its version range includes
the vLLM version of the answer (:mod:`probe.reports.ranges`), one ``reported`` cell of its
own backend (a ``degraded`` report: ``ok`` with ``degraded: true``) and, for a failure, one ``ok``
cell per backend of the same kind the thread saw working instead (``works_with``). MoE, attention
and engine reports only: the others (dense GEMM, sampler, communication, compile) have no half of
the answer to speak for; :func:`probe.reports.base.reports_for` lists them.

Each cell carries ``applies``: the GPU, kind, backend, quant (``null``: any), the report's features
(model facts must match the model's profile; a report that needs a setting the default set-up does
not turn on — FP8 KV cache, MTP, expert parallelism — does not apply; the reporter's own set-up,
such as TP, is no condition) and its models (``model_specific``: only those; else any model that
matches, and the answer names the model it was seen on). A report from another stack (SGLang,
TensorRT-LLM, a standalone flash-attn build) counts only for how a shared kernel behaved, not for
its own build or gate. A refusal (``unsupported``) seen on older vLLM versions than a vLLM check
that accepts the backend for this model (``superseded_for``, :func:`probe.recommend.sources.mark_superseded`)
no longer applies to it.

A failure of the kernels themselves (a fault, wrong output, a hang, a crash, a refusal or a kernel
that will not initialise or compile) also reaches the other GPUs of the seen GPU's ``f`` family
(:func:`kin`: sm_100 / sm_103, sm_120 / sm_121 — kernels built for the family run on all of them, so
the same code fails the same way): one cell per sibling, ``applies.kin_of`` naming the GPU it was
seen on, and the answer says so. Failures of a build or an environment (no kernel image, an import,
a version mismatch, out of memory) do not carry: a sibling may have its own cubin or more memory.
"""

from __future__ import annotations

from typing import Any

from probe.catalog.names import model_key
from probe.recommend.types import EvidenceCell, Request
from probe.reports import vocab
from probe.reports.base import features_fit
from probe.reports.ranges import VersionStatus
from probe.reports.record import Report
from probe.versions import version_key

CELL_KINDS = ("moe", "attention", "engine")
#: outcomes that are the kernels' own behaviour, carried to the seen GPU's family siblings
KIN_OUTCOMES = frozenset(
    {"device_fault", "wrong_output", "timeout", "crashed", "unsupported", "kernel_init_failed", "jit_failed"}
)


def kin(sm: int) -> list[int]:
    """The other GPUs of the ``f`` families ``sm`` belongs to (the GPU catalog's ``families``)."""
    from probe.catalog.gpus import catalog

    fams = catalog().families
    return sorted({m for members in fams.values() if sm in members for m in members} - {sm})


CONDITIONS = ("model", "setting")  # feature roles that limit where a report applies


def request_features(req: Request) -> dict[str, Any]:
    """The model facts of the request that a report's features are checked against."""
    p = req.profile
    hybrid = p.hybrid or {}
    return {
        "head_size": p.head_dim,
        "sinks": bool(hybrid.get("attention_sinks")),
        "sliding_window": bool(hybrid.get("sliding_window")),
        "mla": req.mla,
        "activation": p.moe.activation if p.moe else None,
        "sparse": False,
        "softcap": False,
        "alibi": False,
        "non_causal": False,
        # the deployment the user asked for (settings a report may need turned on)
        "kv_cache_dtype": req.deploy.kv_cache_dtype,
        "ep": req.deploy.ep,
        "dp": req.deploy.dp,
        "cuda_graphs": not req.deploy.enforce_eager,
        "tp": req.tp or 1,
        **_speculative(req.deploy.speculative),
    }


def _speculative(method: str | None) -> dict[str, Any]:
    """The speculative-decoding setting and the model facts its drafter adds (DFlash: non-causal)."""
    if not method:
        return {}
    return {"spec_decode": method, **vocab.SPEC_DRAFT_FEATURES.get(method.lower(), {})}


def is_model(req: Request, name: Any) -> bool:
    """``name`` (as a report wrote it: an HF id, maybe with a quant suffix) is the request's model."""
    return isinstance(name, str) and model_key(name) in {model_key(n) for n in req.profile.names()}


def applies(c: EvidenceCell, req: Request) -> bool:
    """A report cell (with ``applies``) that concerns this request (GPU, quant, features, model)."""
    a = c.get("applies") or {}
    if a.get("gpu_sm") not in (None, req.sm):
        return False
    if a.get("quant") not in (None, req.quant) and c.kind != "attention":
        return False
    if not features_fit(a.get("features") or {}, request_features(req)):
        return False
    if any(is_model(req, m) for m in a.get("superseded_for") or ()):
        return False  # vLLM's own check accepts it for this model at a newer version than the refusal's
    if c.ok and not _same_experts(c, req):
        return False
    return not a.get("model_specific") or any(is_model(req, m) for m in a.get("models") or ())


def _seen_activation(model: Any) -> str:
    """The experts' activation of the model a report was seen on: its catalog profile's, else vLLM's
    common gated SiLU (a report that says nothing of it was, nearly always, on such a model)."""
    from probe.catalog.models import find_profile

    prof = find_profile(model) if isinstance(model, str) else None
    return (prof.moe.activation if prof is not None and prof.moe else None) or "silu"


def _same_experts(c: EvidenceCell, req: Request) -> bool:
    """A success seen on another model speaks for this one only where their experts compute the same
    activation (a report that states its activation is matched by ``features_fit``): kernels proven on
    SiLU experts say nothing of GELU ones."""
    mine = req.profile.moe.activation if req.profile.moe else None
    if (
        c.kind == "attention"
        or mine is None
        or "activation" in ((c.get("applies") or {}).get("features") or {})
    ):
        return True
    model = c.get("model")
    return (model is not None and is_model(req, model)) or _seen_activation(model) == mine


def scope(c: EvidenceCell, req: Request) -> str | None:
    """How a field report reaches this request ('reported on Qwen3.5-397B-A17B, applies by GPU x
    backend x quant'; from a family sibling: 'reported on sm_100, its sm_100f family sibling (the same
    kernels), applies by GPU family x backend'), or None for a report on this very model and GPU (or a
    cell without ``applies``)."""
    a = c.get("applies")
    if not a:
        return None
    kin_of = a.get("kin_of")
    sibling = f"on sm_{kin_of}, its {a.get('family')} family sibling (the same kernels)" if kin_of else None
    seen_on = c.get("model")
    if a.get("model_specific") or (seen_on and is_model(req, seen_on)):
        return f"reported for this model {sibling}" if sibling else None
    conditions = sorted(k for k in a.get("features") or {} if vocab.FEATURES[k][0] in CONDITIONS)
    quant = ["quant"] if a.get("quant") else []
    keys = ["GPU family" if sibling else "GPU", "backend", *quant, *conditions]
    where = f"reported on {seen_on}" if seen_on else f"reported for sm_{a.get('gpu_sm')}"
    return f"{where}{' ' + sibling if sibling else ''}, applies by {' x '.join(keys)}"


def relevant(c: EvidenceCell, req: Request) -> bool:
    """A report (with ``applies``) of a MoE / attention / engine cell that concerns this request."""
    if c.kind == "engine":
        return applies(c, req) and (req.tp is None or c.get("tp") in (None, req.tp))
    return applies(c, req)


# ------------------------------------------------------------------ reports -> cells


def newest(versions: tuple[str, ...]) -> str | None:
    """The newest of some exact versions."""
    keyed = [(k, v) for v in versions if (k := version_key(v)) is not None]
    return max(keyed)[1] if keyed else None


def citation(r: Report, status: VersionStatus) -> str:
    """'https://… (2025-11-03; seen on vLLM 0.11.0, open as of 2026-11-24)'."""
    return f"{r.where} ({r.date}; {status.note})"


def _roles(kind: str, backend: str) -> dict[str, Any]:
    if kind == "moe":
        return {"moe_backend": backend}
    if kind == "attention":
        return {"attention_backend": backend}
    parts = backend.split("+")
    moe = next((p for p in parts if p in vocab.backends("moe")), None)
    attn = next((p for p in parts if p in vocab.backends("attention")), None)
    return {k: v for k, v in (("moe_backend", moe), ("attention_backend", attn)) if v}


def _workaround(r: Report) -> dict[str, Any] | None:
    """The report's workaround as the answer could carry it (flags, env, note), or None."""
    w = r.workaround
    return None if w is None else {"flags": list(w.flags), "env": dict(w.env), "note": w.note}


def _cell(r: Report, sm: int, status: VersionStatus, backend: str, works: bool) -> dict[str, Any]:
    degraded = r.outcome == "degraded" and not works
    outcome = "ok" if works or r.outcome == "degraded" else r.outcome
    ident = (
        f"reported/{r.id}" + (f"/sm_{sm}" if len(r.gpus) > 1 else "") + (f"/works/{backend}" if works else "")
    )
    cell: dict[str, Any] = {
        "id": ident,
        "kind": r.kind,
        "evidence": "reported",
        "basis": "field_report",
        "gpu_sm": sm,
        "backend": backend,
        **_roles(r.kind, backend),
        "fa_version": None if works else r.fa_version,
        "quant": r.quant,
        "model": r.models[0] if r.models else None,
        "tp": r.features.get("tp") if isinstance(r.features.get("tp"), int) else None,
        "outcome": outcome,
        "degraded": degraded,
        "degraded_reasons": [r.symptom] if degraded else [],
        "root_cause": (f"worked where {r.backend} failed: {r.symptom}" if works else r.root_cause),
        "phase": None if works else r.phase,
        "exit_code": None if works else r.exit_code,
        "timings": {} if works else dict(r.timings),
        "citation": citation(r, status),
        "details": {
            "report": r.id,
            "versions": status.note,
            "log_line": r.log_line,
            "symptom": r.symptom,
            "workaround": _workaround(r) if not works else None,
        },
    }
    if not works:
        cell.update(r.shape)
    cell["applies"] = {
        "gpu_sm": sm,
        "kind": r.kind,
        "backend": backend,
        "quant": r.quant,
        "features": dict(r.features),
        "models": list(r.models),
        "model_specific": r.model_specific,
        "version_state": status.state,
        "seen_in": r.seen_in,
        "vllm_seen": newest(r.versions.get("vllm", ())),
    }
    return cell


def kin_cells(r: Report, sm: int, status: VersionStatus) -> list[dict[str, Any]]:
    """The cell report ``r`` gives on ``sm``, a family sibling of a GPU it was seen on (failures of the
    kernels only, see the module docstring); [] when none carries."""
    if r.kind not in CELL_KINDS or not r.speaks_for_vllm or r.outcome not in KIN_OUTCOMES or sm in r.gpus:
        return []
    seen = next((g for g in r.gpus if sm in kin(g)), None)
    if seen is None:
        return []
    cell = _cell(r, sm, status, r.backend, works=False)
    cell["id"] = f"reported/{r.id}/kin/sm_{sm}"
    family = min(seen, sm)
    cell["applies"].update(kin_of=seen, family=f"sm_{family}f")
    return [cell]


def report_cells(r: Report, sm: int, status: VersionStatus) -> list[dict[str, Any]]:
    """The cells report ``r`` gives on GPU ``sm``: its own backend's, then (for a failure) one ``ok``
    cell per backend the thread saw working instead (not the failing backend itself: another FA
    version of FLASH_ATTN cannot be told apart)."""
    if r.kind not in CELL_KINDS or not r.speaks_for_vllm:
        return []
    cells = [_cell(r, sm, status, r.backend, works=False)]
    if r.outcome != "ok":
        kind = r.kind
        for w in r.works_with:
            if w != r.backend and (kind == "engine" or w in vocab.backends(kind)):
                cells.append(_cell(r, sm, status, w, works=True))
    return cells
