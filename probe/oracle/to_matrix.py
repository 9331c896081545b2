"""Parent side, step 3: the oracle's answers as matrix cells (evidence ``predicted``, basis ``vllm_check``).

One cell per distinct answer:

* attention — ``predicted/vllm/attention/sm_<sm>/<model>/<backend>`` for every backend vLLM's
  priority lists name for the model's MLA-ness, plus ``…/auto`` (``details.selected``: what
  ``--attention-backend`` unset picks there; ``details.auto_order``: the order it tried). A model
  with several attention layer kinds (Gemma-4's sliding and global layers, gpt-oss's sliding and
  full ones) is asked per kind and gets one cell per backend all the same: ``ok`` only if vLLM
  accepts the backend for every kind; ``details.kinds`` lists each kind's verdict and
  ``details.refused_by`` the kind whose refusal (vLLM's message, ``root_cause``) decided it;
* MoE — ``predicted/vllm/moe/sm_<sm>/<model>/<quant>/<backend>`` for every ``--moe-backend``
  value and ``auto``; when the verdict is the same at every TP asked, one cell with ``tp`` unset
  and ``details.tp_sizes`` listing them, else one cell per TP (``…/tp=<n>``).

``outcome`` is ``ok`` or ``unsupported``; ``root_cause`` is vLLM's refusal verbatim;
``details.file`` / ``details.line`` / ``details.check`` say where the check lives in the installed
vLLM (relative to site-packages). A vLLM without an adapter gives one ``skipped`` cell that
says why.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

from probe import __version__
from probe.matrix.schema import Cell, Matrix, Provenance, RunInfo, Versions
from probe.oracle.collect import OracleAnswer, OracleRun
from probe.oracle.queries import AttentionQuery, MoeQuery, OracleRequest
from probe.outcomes import Outcome


def _outcome(ans: OracleAnswer) -> Outcome:
    if ans.ok is None:
        return Outcome.SKIPPED
    return Outcome.OK if ans.ok else Outcome.UNSUPPORTED


def _details(ans: OracleAnswer) -> dict[str, Any]:
    out: dict[str, Any] = {"file": ans.file, "line": ans.line, "check": ans.check}
    out.update({k: v for k, v in ans.extra.items() if v is not None and k not in _DROP})
    reasons = out.get("reasons")
    if isinstance(reasons, list) and len(reasons) == 1 and reasons[0].get("check") == out.get("check"):
        del out["reasons"]  # the one reason is already file / line / check
    return {k: v for k, v in out.items() if v is not None}


_DROP = {"in_auto_order", "experts_classes", "selected_class"}


def attention_cell(ans: OracleAnswer, q: AttentionQuery, vllm: str | None) -> Cell:
    fa = ans.extra.get("fa_version")
    return Cell(
        id=f"predicted/vllm/attention/sm_{ans.sm}/{q.model}/{ans.backend}" + _kv_suffix(q),
        kind="attention",
        evidence="predicted",
        basis="vllm_check",
        gpu_sm=ans.sm,
        backend=ans.backend,
        attention_backend=ans.backend,
        fa_version=fa if isinstance(fa, int) else None,
        model=q.model,
        num_heads=q.num_heads,
        num_kv_heads=q.num_kv_heads,
        head_dim=q.head_size,
        vllm_version=vllm,
        outcome=_outcome(ans),
        root_cause=ans.message,
        details=_details(ans),
        params={
            **{k: True for k in ("use_mla", "has_sink", "has_sliding_window") if getattr(q, k)},
            **({"kv_cache_dtype": q.kv_cache_dtype} if q.kv_cache_dtype != "auto" else {}),
        },
    )


def _kind_entry(ans: OracleAnswer, q: AttentionQuery) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": q.kind, "layers": q.layers, "ok": ans.ok}
    if ans.message:
        entry["message"] = ans.message
    if ans.extra.get("selected"):
        entry["selected"] = ans.extra["selected"]
    return entry


def _deciding(group: list[tuple[OracleAnswer, AttentionQuery]]) -> tuple[OracleAnswer, AttentionQuery]:
    """The answer that decides a multi-kind cell: the first refusal, else the first that could not
    ask, else the model's main kind (most layers: the request lists it first)."""
    for wanted in (False, None):
        hit = next(((a, q) for a, q in group if a.ok is wanted), None)
        if hit is not None:
            return hit
    return group[0]


def attention_kinds_cell(group: list[tuple[OracleAnswer, AttentionQuery]], vllm: str | None) -> Cell:
    """One cell for (sm, model, backend) over the model's attention kinds (see the module docstring)."""
    if len(group) == 1:
        return attention_cell(*group[0], vllm)
    main_ans, main_q = group[0]
    ans, q = _deciding(group)
    cell = attention_cell(ans, q, vllm)
    details = dict(cell.details)
    details["kinds"] = [_kind_entry(a, k) for a, k in group]
    if ans.ok is not True:
        details["refused_by" if ans.ok is False else "not_asked_for"] = q.kind
    picks = {e.get("selected") for e in details["kinds"]} - {None}
    if main_ans.extra.get("selected"):
        details["selected"] = main_ans.extra["selected"]
    if len(picks) > 1:
        details["selected_per_kind"] = {e["kind"]: e.get("selected") for e in details["kinds"]}
    params = {
        k: True for k in ("use_mla", "has_sink", "has_sliding_window") if any(getattr(x, k) for _, x in group)
    }
    fa = main_ans.extra.get("fa_version")
    return cell.model_copy(
        update={
            "num_heads": main_q.num_heads,
            "num_kv_heads": main_q.num_kv_heads,
            "head_dim": main_q.head_size,
            "fa_version": fa if isinstance(fa, int) else None,
            "details": details,
            "params": {**cell.params, **params, "attention_kinds": len(group)},
        }
    )


def _verdict_key(ans: OracleAnswer) -> tuple[Any, ...]:
    return (ans.ok, ans.message, ans.extra.get("selected"), ans.extra.get("experts_class"))


def moe_cells(group: list[tuple[OracleAnswer, MoeQuery]], vllm: str | None) -> list[Cell]:
    """Cells for one (sm, model, quant, backend) over its TP sizes: one if they all agree."""
    ans0, q0 = group[0]
    tps = sorted(q.tp for _, q in group)
    same = len({_verdict_key(a) for a, _ in group}) == 1
    chosen = [(ans0, q0)] if same else sorted(group, key=lambda g: g[1].tp)
    cells = []
    for ans, q in chosen:
        suffix = _parallel_suffix(q) + ("" if same else f"/tp={q.tp}")
        details = _details(ans)
        if same:
            details["tp_sizes"] = tps
        cells.append(
            Cell(
                id=f"predicted/vllm/moe/sm_{ans.sm}/{q.model}/{q.quant}/{ans.backend}{suffix}",
                kind="moe",
                evidence="predicted",
                basis="vllm_check",
                gpu_sm=ans.sm,
                backend=ans.backend,
                moe_backend=ans.backend,
                quant=q.quant,
                experts=q.experts,
                top_k=q.top_k,
                hidden=q.hidden,
                intermediate=None if same else q.intermediate // q.tp,
                tp=None if same else q.tp,
                model=q.model,
                vllm_version=vllm,
                outcome=_outcome(ans),
                root_cause=ans.message,
                details=details,
                params={"activation": q.activation, **({"ep": True, "dp": q.dp} if q.ep else {})},
            )
        )
    return cells


def _kv_suffix(q: AttentionQuery) -> str:
    return f"/kv={q.kv_cache_dtype}" if q.kv_cache_dtype != "auto" else ""


def _parallel_suffix(q: MoeQuery) -> str:
    return f"/ep/dp={q.dp}" if q.ep else ""


def skipped_cell(reason: str, vllm: str | None) -> Cell:
    return Cell(
        id="predicted/vllm/skipped",
        kind="import",
        evidence="predicted",
        basis="vllm_check",
        vllm_version=vllm,
        outcome=Outcome.SKIPPED,
        root_cause=reason,
    )


def cells_from_run(request: OracleRequest, run: OracleRun) -> list[Cell]:
    vllm = run.versions.get("vllm")
    if run.skipped:
        return [skipped_cell(run.skipped, vllm)]
    cells: list[Cell] = []
    attn_groups: dict[tuple[Any, ...], list[tuple[OracleAnswer, AttentionQuery]]] = defaultdict(list)
    moe_groups: dict[tuple[Any, ...], list[tuple[OracleAnswer, MoeQuery]]] = defaultdict(list)
    for ans in run.answers:
        if ans.kind == "attention":
            q_attn = request.attention[ans.query]
            attn_groups[(ans.sm, q_attn.model, q_attn.kv_cache_dtype, ans.backend)].append((ans, q_attn))
        elif ans.kind == "moe":
            q = request.moe[ans.query]
            moe_groups[(ans.sm, q.model, q.quant, ans.backend, q.ep, q.dp)].append((ans, q))
    cells += [attention_kinds_cell(group, vllm) for group in attn_groups.values()]
    for group in moe_groups.values():
        cells += moe_cells(group, vllm)
    return cells


def build_matrix(request: OracleRequest, run: OracleRun, note: str | None = None) -> Matrix:
    v = run.versions
    versions = Versions(
        vllm=v.get("vllm"),
        torch=v.get("torch"),
        flashinfer=v.get("flashinfer-python"),
        triton=v.get("triton"),
    )
    targets = ", ".join(f"sm_{t.sm}" for t in request.targets)
    text = (
        f"vLLM's own selection code (oracle adapter {run.adapter}) asked for {targets} with the "
        f"capability faked in a sandboxed child; no GPU used. FA builds: {run.fa or '-'}."
    )
    cells = cells_from_run(request, run)
    return Matrix(
        provenance=Provenance(
            created_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            probe_version=__version__,
            versions=versions,
            label=f"vLLM {v.get('vllm')} oracle",
            image=f"python {run.python}",
            note=f"{text} {note}" if note else text,
        ),
        run=RunInfo(status="partial" if run.skipped else "complete", cells_planned=len(cells)),
        cells=cells,
    )


def compact_json(matrix: Matrix) -> str:
    """The matrix as JSON without default-valued fields, one cell per line (small, diffable, loadable)."""
    doc = matrix.model_dump(mode="json", exclude_defaults=True)
    return _compact_doc(doc, doc.pop("cells", []))


def _compact_doc(doc: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    head = {"schema_version": doc.pop("schema_version", 1), "kind": doc.pop("kind", "matrix"), **doc}
    text = json.dumps(head, separators=(",", ":"))[:-1]
    body = ",\n".join(json.dumps(c, separators=(",", ":"), sort_keys=True) for c in cells)
    return f'{text},"cells":[\n{body}\n]}}\n'


ANY_GPU_FILE = "any-gpu.json"


def split_by_gpu(doc: dict[str, Any]) -> dict[str, str]:
    """A predictions matrix (as a JSON document) split per GPU target: ``sm_<N>.json`` -> its text.

    The layout of ``probe predict -o DIR`` (``matrices/predicted/vllm-<version>/``): ``probe
    recommend --gpu sm_120`` then reads one ~0.6 MB file instead of all of them. Each file is a
    complete matrix (same provenance, label naming the GPU, ``run.cells_planned`` its own count);
    cells without a GPU (a ``skipped`` run) go to ``any-gpu.json``.
    """
    head = {k: v for k, v in doc.items() if k != "cells"}
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in doc.get("cells", []):
        per[f"sm_{c['gpu_sm']}.json" if c.get("gpu_sm") else ANY_GPU_FILE].append(c)
    out: dict[str, str] = {}
    for name, cells in sorted(per.items()):
        part = json.loads(json.dumps(head))
        prov = part.setdefault("provenance", {})
        if name != ANY_GPU_FILE:
            prov["label"] = f"{prov.get('label') or 'predictions'}, {name[:-5]}"
        part.setdefault("run", {})["cells_planned"] = len(cells)
        out[name] = _compact_doc(part, cells)
    return out


def write_split(matrix: Matrix, folder: str) -> list[str]:
    """Write :func:`split_by_gpu` of ``matrix`` into ``folder`` (created); the paths written."""
    from pathlib import Path

    from probe.matrix.io import write_bytes_atomic

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    doc = json.loads(compact_json(matrix))
    written = []
    for name, text in split_by_gpu(doc).items():
        # gzip (no time stamp: the same answers give the same bytes): 25x smaller, one cell a line inside
        path = root / f"{name}.gz"
        write_bytes_atomic(path, gzip.compress(text.encode("utf-8"), mtime=0))
        written.append(str(path))
    return written
