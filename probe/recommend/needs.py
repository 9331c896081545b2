"""What the answer needs to work beyond its flags: Python packages its backends import, and engine
arguments that measured engine runs showed a model family needs.

* Packages: the backend catalog (``runtime`` + ``components.imports``) names, per backend, the distribution
  it imports
  (FlashInfer for ``flashinfer_*`` / FLASHINFER, CuTe-DSL for FA4, humming-kernels for humming).
  When the image is known to lack one — a ``--scan`` report without it, or measured cells of this
  GPU that died importing it — the answer says so plainly; otherwise it names it as a requirement.
* Engine arguments: engine runs of a model of the same family (model type) that died importing a
  module without an engine argument and ran with it (vLLM 0.26's GDN prefill imports FlashInfer
  unless ``--gdn-prefill-backend triton``). When the image lacks that module the argument joins the
  flags; else the answer names both ways out.
"""

from __future__ import annotations

import re
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

from probe.catalog.backends import catalog
from probe.recommend.types import EvidenceCell, Pair, Request

_MISSING = re.compile(r"No module named '([\w.]+)'")


@dataclass(frozen=True)
class Needs:
    lines: list[str]
    engine_args: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()


def missing_module(c: EvidenceCell) -> str | None:
    """The top-level module a failed cell could not import."""
    if c.get("outcome") != "import_error":
        return None
    m = _MISSING.search(str(c.get("root_cause") or ""))
    return m.group(1).split(".")[0] if m else None


def image_lacks(mine: list[EvidenceCell], scanned: Set[str] | None) -> set[str]:
    """Modules the image is known to lack: measured cells of this GPU that died importing them."""
    return {m for c in mine if c.evidence == "measured" for m in [missing_module(c)] if m}


def _packages(best: Pair) -> list[dict[str, str]]:
    """What the chosen backends import that an image may lack (the backend catalog's
    ``components.imports``)."""
    found = catalog().imports_of("moe", best.moe) if best.moe else []
    found += catalog().imports_of("attention", best.attn, best.fa)
    return list({p["install"]: p for p in found}.values())


def _package_lines(best: Pair, lacks: set[str], scanned: Set[str] | None) -> list[str]:
    out = []
    for pkg in _packages(best):
        if scanned is not None and pkg["install"] in scanned:
            continue
        if scanned is not None:
            where = " — the scanned image lacks it"
        elif pkg["module"] in lacks:
            where = " — a measured image of this GPU lacked it"
        else:
            where = ""
        out.append(f"{pkg['install']} installed (its backends import `{pkg['module']}`){where}")
    return out


def _fixing_args(family: list[EvidenceCell], module: str) -> dict[str, str] | None:
    """Engine arguments with which a run of the family worked where runs without them died importing
    ``module``."""
    died = [c for c in family if missing_module(c) == module and not c.get("engine_args")]
    if not died:
        return None
    fixed = [c for c in family if c.ok and c.get("engine_args")]
    return dict(fixed[0].get("engine_args")) if fixed else None


def engine_needs(family: list[EvidenceCell], lacks: set[str], best: Pair, name: str) -> Needs:
    """Engine arguments the model family needs (see the module docstring)."""
    lines: list[str] = []
    args: dict[str, str] = {}
    for module in sorted({m for c in family for m in [missing_module(c)] if m}):
        fix = _fixing_args(family, module)
        if not fix or all(best.args.get(k) == v for k, v in fix.items()):
            continue
        spelled = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(fix.items()))
        if module in lacks:
            args.update(fix)
        lines.append(
            f"`{module}` importable, or {spelled}: engine runs of {name}'s family died importing {module} "
            f"without it and ran with it"
            + (" (added to the flags: a measured image of this GPU lacked it)" if module in lacks else "")
        )
    return Needs(lines, args)


def needs(
    best: Pair,
    req: Request,
    mine: list[EvidenceCell],
    family: list[EvidenceCell],
    scanned: Set[str] | None,
) -> Needs:
    """Everything the answer needs beyond its flags, and the engine arguments to add."""
    lacks = image_lacks(mine, scanned)
    eng = engine_needs(family, lacks, best, req.name)
    return Needs(_package_lines(best, lacks, scanned) + eng.lines, eng.engine_args)


#: flags a workaround may carry that pick a backend or change what the user asked for: such a
#: workaround is a reason to choose another backend (the ranking's job), never a flag to add
_CHOOSING = (
    "--moe-backend",
    "--attention-backend",
    "--kv-cache-dtype",
    "--speculative-config",
    "--quantization",
)


def report_workarounds(
    best: Pair,
    req: Request,
    features: dict[str, Any],
    files: list[str] | None,
    resolved: dict[str, str | None] | None = None,
) -> Needs:
    """Flags and environment that field reports in range give for the chosen backends on this GPU
    (a failure the answer keeps its backend despite — measured working here — or a degraded run):
    each added to the answer with the report's link. ``auto`` counts as what it resolves to here."""
    from probe.reports.base import load_reports, workarounds_for

    lines: list[str] = []
    env: dict[str, str] = {}
    flags: list[str] = []
    pool = load_reports(files or None, frozenset({req.sm}), check=False)
    picked = {k: (v or "").split(" (FA")[0] or None for k, v in (resolved or {}).items()}
    chosen = [
        (picked.get("moe") if best.moe == "auto" else best.moe, "moe"),
        (picked.get("attention") if best.attn == "auto" else best.attn, "attention"),
    ]
    for backend, kind in chosen:
        if not backend:
            continue
        found = workarounds_for(
            req.sm, backend, kind, req.quant, features, req.vllm, model=req.name, reports=pool
        )
        for r, w in found:
            if kind == "attention" and r.fa_version not in (None, best.fa):
                continue  # a report on another FlashAttention version than the answer's
            if any(f.split("=")[0] in _CHOOSING for f in w.flags) or not (w.flags or w.env):
                continue
            spelled = " ".join([*(f"{k}={v}" for k, v in w.env.items()), *w.flags])
            link = r.source or r.citation or r.id
            lines.append(f"{spelled}: a field report's workaround for {backend} here ({r.outcome}; {link})")
            env.update(w.env)
            flags += [f for f in w.flags if f not in flags]
    return Needs(lines, {}, env, tuple(flags))
