"""Pydantic-free reading of static predictions: verdict rows of `probe scan` tables as `predicted` cells."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


def backend_kind(backend: str) -> str:
    """'attention' for vLLM attention enum names (the backend catalog's, FA2/FA3/FA4 too), else 'moe'."""
    from probe.catalog.backends import catalog, is_attention

    up = backend.upper()
    if catalog().find("moe", backend) is None and is_attention(up):
        return "attention"
    if re.match(r"^(FA[234]|FLASH_ATTN.*)$", up):
        return "attention"
    return "moe"


STATIC_KIND = "probe.static-predictions"


def _is_view_cells(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "target" in value[0]


def is_static_predictions(doc: dict[str, Any]) -> bool:
    """A static-predictions / ``probe scan`` document rather than a matrix or fleet."""
    if doc.get("kind") == STATIC_KIND or isinstance(doc.get("provenance"), list):
        return True
    if "provenance" in doc or doc.get("kind") == "fleet":
        return False
    if _is_view_cells(doc.get("cells")):
        return True
    return "cells" not in doc and any(
        k in doc for k in ("backends", "backend_cells", "backend_table", "verdicts", "files")
    )


def _short(text: str, n: int = 400) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _view_rows(cells: list[Any], variants: bool) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Rows of ``probe scan --backends --json`` (``probe.arch.backend_view.backends_json``) cells."""
    for c in cells:
        if not isinstance(c, dict) or not {"target", "verdict"} <= c.keys():
            continue
        if c.get("primary") is False and not variants:
            continue
        bid = str(c.get("backend") or "")
        name = str(c.get("name") or bid.rsplit(".", 1)[-1])
        if bid.startswith("attention.flash_attn.") and bid.rsplit(".", 1)[-1].lower() in (
            "fa2",
            "fa3",
            "fa4",
        ):
            name = bid.rsplit(".", 1)[-1].upper()
        via = next(
            (r.get("via") for r in c.get("requirements") or [] if isinstance(r, dict) and r.get("via")), None
        )
        files = sorted(
            {f for r in c.get("requirements") or [] if isinstance(r, dict) for f in r.get("files") or []}
        )
        yield (
            name,
            str(c["target"]),
            {
                "verdict": c["verdict"],
                "reason": _short(str(c.get("reason") or c["verdict"])),
                "via": via,
                "files": files[:5],
                "variant": c.get("variant") if c.get("primary") is False else None,
                "primary_variant": None if c.get("primary") is False else c.get("variant"),
            },
        )


def iter_verdict_rows(
    data: dict[str, Any], variants: bool = False
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(backend, target, {verdict, reason, via?, files?}) from the accepted static-table shapes.

    Accepted: ``{"backends": {backend: {target: {...}}}}``, ``{"backends": [{backend, target, verdict,
    reason}]}``, and the backend view of ``probe scan --backends --json`` (``{"cells": [...]}``, also
    nested as ``{"backends": {"cells": [...]}}``). ``variants``: also the non-primary variants of a
    backend (``cutlass [fp8]``; their row carries ``variant``), which a backend -> target table keeps
    out (one verdict per backend and target).
    """
    for key in ("backend_cells", "cells"):
        if _is_view_cells(data.get(key)):
            yield from _view_rows(data[key], variants)
            return
    if isinstance(data.get("backend_table"), list):
        yield from _table_rows(data["backend_table"], variants)
        return
    raw = data.get("backends", data.get("verdicts", {})) or {}
    if isinstance(raw, dict) and isinstance(raw.get("cells"), list):
        yield from _view_rows(raw["cells"], variants)
        return
    if isinstance(raw, dict):
        for backend, per in raw.items():
            if not isinstance(per, dict):
                continue
            targets = per["targets"] if isinstance(per.get("targets"), dict) else per
            for target, v in targets.items():
                if isinstance(v, dict) and "verdict" in v:
                    yield str(backend), str(target), v
                elif isinstance(v, str):
                    yield str(backend), str(target), {"verdict": v, "reason": v}
    elif isinstance(raw, list):
        if raw and isinstance(raw[0], dict) and "target" not in raw[0] and "backend" in raw[0]:
            yield from _table_rows(raw, variants)
            return
        for v in raw:
            if isinstance(v, dict) and {"backend", "target", "verdict"} <= v.keys():
                yield str(v["backend"]), str(v["target"]), v


_LABEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)(?: \((?P<fa>FA[234])\))?(?: \[(?P<variant>[^\]]*)\])?$")


def _table_rows(rows: list[Any], variants: bool) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Rows of ``probe scan --backends`` tables: {"kind", "backend": "marlin [variant]", "sm_110": "ptx-jit"}.

    The first row of each backend is its primary variant, later rows (``cutlass [fp8]``) its other
    variants (``variant`` set); ``none (gate)`` means vLLM refuses the target.
    """
    seen: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            continue
        m = _LABEL_RE.match(str(row.get("backend", "")).strip())
        if not m:
            continue
        name = m.group("fa") or m.group("name")
        if name in seen and not variants:
            continue
        variant = m.group("variant") if name in seen else None
        primary = m.group("variant") if name not in seen else None
        seen.add(name)
        for key, value in row.items():
            if not re.match(r"^sm_\d+[af]?$", str(key)) or not value:
                continue
            text = str(value)
            verdict = text.split(" ", 1)[0]
            reason = (
                "vLLM refuses this GPU for the backend (its compute-capability gate)"
                if "(gate)" in text
                else f"static verdict {verdict} (probe scan --backends)"
            )
            yield name, str(key), {"verdict": verdict, "reason": reason, "variant": variant,
                                   "primary_variant": primary}  # fmt: skip


def target_sm(target: str) -> int | None:
    m = re.match(r"^(?:sm_?)?(\d{2,3})[af]?$", str(target).strip().lower())
    return int(m.group(1)) if m else None


def predicted_cell_dicts(static: dict[str, Any], variants: bool = False) -> list[dict[str, Any]]:
    """One ``predicted`` cell (as a plain dict, schema-conformant) per backend x target verdict
    (``variants``: and per non-primary variant, ``predicted/cutlass[fp8]/sm_120``)."""
    cells: list[dict[str, Any]] = []
    rows = iter_verdict_rows(static, variants)
    for backend, target, v in sorted(rows, key=lambda r: (r[0], str(r[2].get("variant") or ""), r[1])):
        kind = backend_kind(backend)
        verdict = str(v.get("verdict"))
        loadable = verdict not in ("none", "not-installed")
        reasons: list[str] = []
        if verdict == "ptx-jit":
            reasons.append(f"runs from PTX JIT ({v.get('via') or 'PTX'}) on {target}")
        elif verdict == "jit":
            reasons.append("compiled at first use (needs a working JIT toolchain)")
        reason = str(v.get("reason") or verdict)
        fa = re.match(r"^FA([234])$", backend.upper())
        variant = v.get("variant")
        details = {"verdict": verdict, "via": v.get("via"), "files": list(v.get("files") or [])}
        if variant or v.get("primary_variant"):
            details["variant"] = variant or v.get("primary_variant")
            details["primary"] = not variant
        cells.append(
            {
                "id": f"predicted/{backend}{f'[{variant}]' if variant else ''}/{target}",
                "kind": kind,
                "evidence": "predicted",
                "gpu_sm": target_sm(target),
                "backend": "FLASH_ATTN" if fa else backend,
                "moe_backend": backend if kind == "moe" else None,
                "attention_backend": ("FLASH_ATTN" if fa else backend) if kind == "attention" else None,
                "fa_version": int(fa.group(1)) if fa else None,
                "outcome": "ok"
                if loadable
                else (
                    "skipped"
                    if verdict == "not-installed"
                    else "unsupported"
                    if "gate" in reason.lower()
                    else "no_kernel_image"
                ),
                "degraded": bool(reasons),
                "degraded_reasons": reasons,
                "phase": "static",
                "root_cause": None if loadable else reason,
                "hint": reason if loadable else None,
                "details": details,
            }
        )
    return cells


def variant_for_quant(variants: set[str], quant: str) -> str | None:
    """The scan variant of a backend that a checkpoint in ``quant`` runs (None: the scan has none).

    A variant is named after the quant (``cutlass [fp8]`` serves fp8 and fp8_block), after the
    activation dtype (``marlin [bf16 activations]``: the model's own bf16 activations), or is the
    backend's only build (``default``).
    """
    for name in (quant, quant.split("_", 1)[0], "bf16 activations", "default"):
        if name in variants:
            return name
    return None
