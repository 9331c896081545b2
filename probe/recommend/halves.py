"""The evidence ladder, per half (MoE half, attention half): each half answers from its best rung.

1. ``measured``          — measured at this model's exact shape (:func:`measured_exact`);
2. ``measured_nearest``  — measured at the nearest shape of the same backend x quant, for backends
   vLLM's own check does not refuse for this model (:func:`measured_nearest`; the note says how far);
3. ``predicted``         — the combined verdict of :mod:`.verdict` (oracle / hand rule + ELF scan +
   field reports) (:func:`predicted`);
4. ``reported``          — field reports of the backend working (:func:`reported`).

A half whose best rung gives nothing lists what ruled its backends out (:attr:`Half.ruled_out`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from probe.catalog.backends import BackendCatalog
from probe.recommend import select
from probe.recommend import verdict as v
from probe.recommend.types import Choice, EvidenceCell, Request, unique_cells

RUNGS = ("measured", "measured_nearest", "predicted", "reported")


@dataclass(frozen=True)
class Half:
    role: str  # "moe" | "attention"
    basis: str  # one of RUNGS, or "none"
    choices: list[Choice]
    ruled_out: list[EvidenceCell]


def _timing(cells: list[EvidenceCell], metric: str) -> float | None:
    t = [
        c.cell["timings"][metric]
        for c in cells
        if isinstance((c.get("timings") or {}).get(metric), (int, float))
    ]
    return min(t) if t else None


# ------------------------------------------------------------------ rung 1


def measured_exact(rel: select.Relevant, req: Request, role: str) -> list[Choice]:
    """Rung 1: backends measured working at this model's shape (the kernel-level choices); for attention,
    at every head size the model's layers have (Gemma-4: its d=256 sliding and d=512 global layers)."""
    if role == "moe":
        return select.choices(rel.moe, "moe_backend", "forward_ms_b1", "measured")
    found = select.choices(rel.attention, "attention_backend", "decode_ms", "measured")
    sizes = {k.head_size for k in req.profile.layer_kinds() if not k.mla}
    if len(sizes) < 2:
        return found
    return [ch for ch in found if sizes <= {c.get("head_dim") for c in ch.ok_cells}]


# ------------------------------------------------------------------ rung 2


def _moe_shape(c: EvidenceCell) -> tuple[int, int, int] | None:
    e, h, i = c.get("experts"), c.get("hidden"), c.get("intermediate")
    return (int(e), int(h), int(i)) if e and h and i else None


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Octaves apart, summed over the dimensions."""
    return round(sum(abs(math.log2(x / y)) for x, y in zip(a, b, strict=True)), 2)


def _moe_target(req: Request) -> tuple[int, int, int] | None:
    if not req.experts or not req.intermediate:
        return None
    return (req.experts, req.moe_hidden, req.intermediate // (req.tp or 1))


def _attention_shape(c: EvidenceCell) -> tuple[int, int] | None:
    d, kv = c.get("head_dim"), c.get("num_kv_heads")
    return (int(d), int(kv)) if d and kv else None


def _nearest_groups(
    cells: list[EvidenceCell], shape: Any, target: tuple[int, ...], key: str
) -> dict[tuple[str, int | None], tuple[float, list[EvidenceCell]]]:
    """Per (backend, FA version): the cells at its nearest measured shape and the distance."""
    best: dict[tuple[str, int | None], tuple[float, list[EvidenceCell]]] = {}
    for c in cells:
        s = shape(c)
        if s is None or s == target:
            continue
        k = (str(c.get(key) or c.get("backend")), c.get("fa_version") if key == "attention_backend" else None)
        d = _distance(s, target)
        if k not in best or d < best[k][0]:
            best[k] = (d, [c])
        elif d == best[k][0]:
            best[k][1].append(c)
    return best


def _label(role: str, s: tuple[int, ...]) -> str:
    if role == "moe":
        return f"E={s[0]}/H={s[1]}/I={s[2]}"
    return f"head_dim={s[0]}/kv_heads={s[1]}"


def _vetoed(
    refused: dict[tuple[str, int | None], v.BackendVerdict], b: str, fa: int | None, cells: list[EvidenceCell]
) -> tuple[bool, str]:
    """(ruled out, a caveat for the note) for a backend measured at another shape: a refusal by the
    answer's vLLM's own check, or a field report of the failure, rules it out — the flag would be
    refused, or the failure is known. A backend that is only unconfirmed (a hand rule, an ELF scan of
    another image) is not: a measurement on this GPU outweighs both."""
    x = refused.get((b, fa)) or refused.get((b, None))
    if x is None:
        return False, ""
    if x.steps[2].ok is False or (x.check.source == "vllm_check" and x.check.ok is False):
        return True, ""
    measured = sorted({c.vllm for c in cells if c.vllm})
    if x.check.ok is False and measured:
        return False, f"; measured with vLLM {', '.join(measured)}; {x.check.reason}"
    return False, ""


def measured_nearest(
    mine: list[EvidenceCell],
    req: Request,
    role: str,
    cat: BackendCatalog,
    refused: dict[tuple[str, int | None], v.BackendVerdict],
) -> list[Choice]:
    """Rung 2: backends measured working at the nearest shape of the same backend x quant (MoE) or
    MLA-ness (attention), unless vLLM's check (of the measured version) or a field report refuses
    them for this model."""
    if role == "moe":
        target: tuple[int, ...] | None = _moe_target(req)
        pool = [
            c
            for c in mine
            if c.evidence == "measured"
            and c.kind == "moe"
            and c.get("quant") == req.quant
            and select.same_activation(c, req)
        ]
        shape: Any = _moe_shape
        key, metric = "moe_backend", "forward_ms_b1"
    else:
        p = req.profile
        target = (p.head_dim, p.num_key_value_heads)
        pool = [
            c
            for c in mine
            if c.evidence == "measured"
            and c.kind == "attention"
            and ("MLA" in str(c.get("attention_backend") or "").upper()) == req.mla
        ]
        shape, key, metric = _attention_shape, "attention_backend", "decode_ms"
    if target is None:
        return []
    out: list[Choice] = []
    for (b, fa), (dist, cells) in _nearest_groups(pool, shape, target, key).items():
        vetoed, caveat = _vetoed(refused, b, fa, cells)
        if any(not c.ok for c in cells) or vetoed:
            continue
        at = _label(role, shape(cells[0]))
        note = (
            f"measured at {at}, nearest to this model's {_label(role, target)} ({dist} octaves apart){caveat}"
        )
        out.append(Choice(b, fa, cells, [], _timing(cells, metric), None, "measured_nearest", note))
    return out


# ------------------------------------------------------------------ rungs 3 and 4


def verdicts(
    mine: list[EvidenceCell], req: Request, role: str, cat: BackendCatalog
) -> list[v.BackendVerdict]:
    """The combined predicted verdict of every candidate backend of this half."""
    oracle = v.oracle_cells(mine, req, role)
    pool = [
        c
        for c in mine
        if c.kind == role and (v.is_scan(c) or (c.evidence == "reported" and c.get("applies")))
    ]
    return [
        v.verdict(pool, oracle, req, role, b, fa, cat) for b, fa in v.candidates(pool, oracle, req, role, cat)
    ]


def predicted(vs: list[v.BackendVerdict]) -> list[Choice]:
    """Rung 3: backends the combined verdict predicts to work."""
    out = []
    for x in vs:
        if x.ok:
            out.append(Choice(x.backend, x.fa, x.ok_cells, [], None, None, "predicted", x.text))
    return out


def reported(vs: list[v.BackendVerdict]) -> list[Choice]:
    """Rung 4: backends a field report shows working, that nothing else refuses outright."""
    out = []
    for x in vs:
        rep = x.steps[2]
        if rep.ok and x.check.ok is not False and x.steps[1].ok is not False:
            out.append(Choice(x.backend, x.fa, rep.cells, [], None, None, "reported", rep.reason))
    return out


def half(
    rel: select.Relevant, mine: list[EvidenceCell], req: Request, role: str, cat: BackendCatalog
) -> Half:
    """The best rung of the ladder that gives this half a working backend."""
    vs = verdicts(mine, req, role, cat)
    refused = {(x.backend, x.fa): x for x in vs if not x.ok}
    ruled = [c for x in vs if not x.ok for c in x.bad_cells]
    ruled += [
        c for c in (rel.moe if role == "moe" else rel.attention) if c.failed and c.evidence == "measured"
    ]
    # a backend measured failing at this shape on this GPU is not predicted to work
    failed_here = {(str(c.get("backend")), c.get("fa_version")) for c in ruled if c.evidence == "measured"}
    vs_left = [x for x in vs if (x.backend, x.fa) not in failed_here and (x.backend, None) not in failed_here]
    for basis, found in (
        ("measured", lambda: measured_exact(rel, req, role)),
        ("measured_nearest", lambda: measured_nearest(mine, req, role, cat, refused)),
        ("predicted", lambda: predicted(vs_left)),
        ("reported", lambda: reported(vs_left)),
    ):
        got = found()
        if got:
            return Half(role, basis, got, unique_cells(ruled))
    return Half(role, "none", [], unique_cells(ruled))
