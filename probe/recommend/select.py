"""Choosing: which cells concern the request, which backends they show working, the candidate
MoE x attention pairs, and the order pairs are ranked in (:class:`PairRank`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from probe.catalog.backends import BackendCatalog
from probe.recommend import report_match
from probe.recommend.layout import layout_fits
from probe.recommend.types import (
    EVIDENCE_RANK,
    ArgsKey,
    Choice,
    EvidenceCell,
    Pair,
    PairRank,
    Request,
    args_key,
)
from probe.recommend.verdict import deploy_fits

KERNEL_METRIC = (
    "estimated decode ms per token (moe forward_ms_b1 x MoE layers + attention decode_ms x attention layers)"
)
MOE_ONLY_METRIC = "tokens_per_s of end-to-end runs naming the MoE backend"


# ------------------------------------------------------------------ relevance


def _shard_tps(req: Request) -> dict[int, int]:
    """MoE intermediate width per shard -> the TP degree that gives it."""
    inter = req.intermediate
    if not inter:
        return {}
    return {inter // tp: tp for tp in (1, 2, 4, 8, 16) if inter % tp == 0}


def _quant_ok(cell_quant: Any, quant: str) -> bool:
    return cell_quant in (None, "") or cell_quant == quant


def _predicted_moe_relevant(c: EvidenceCell, req: Request, cat: BackendCatalog) -> bool:
    rec = cat.find("moe", str(c.get("backend")))
    if rec is None or req.quant not in rec.vllm.quants or not rec.vllm.single_gpu_cuda:
        return False
    floor = rec.vllm.min_sm.get(req.quant)
    return floor is None or (c.get("gpu_sm") or 0) >= floor


def moe_relevant(c: EvidenceCell, req: Request, cat: BackendCatalog) -> bool:
    """A MoE cell at this model's shape and quant (or shape-free), or an engine run naming only the
    MoE backend."""
    if c.get("applies"):  # a field report says itself what it applies to
        return c.kind in ("moe", "engine") and bool(req.experts) and _report_fits(c, req, "moe")
    if c.kind == "engine" and c.get("moe_backend") and not c.get("attention_backend") and req.experts:
        return engine_relevant(c, req)
    if c.kind != "moe" or not req.experts:
        return False
    if c.get("model") and not req.is_model(c.get("model")):
        return False
    if c.get("basis") == "vllm_check":  # vLLM's own check, for this model: its quant, TP, deployment
        return (
            c.get("quant") == req.quant and c.get("tp") in (None, req.least_tp) and deploy_fits(c, req, "moe")
        )
    if c.evidence == "predicted":
        return _predicted_moe_relevant(c, req, cat)
    if not _quant_ok(c.get("quant"), req.quant):
        return False
    if c.get("experts") is None:
        return True  # a shape-free fact (e.g. "triton is rejected for NVFP4"), or a model's own cell
    if c.get("experts") != req.experts or c.get("hidden") not in (req.moe_hidden, req.profile.hidden_size):
        return False
    if not same_activation(c, req):
        return False  # the layer probe ran gated SiLU experts: no evidence for relu2 / gelu experts
    shard_tp = _shard_tps(req).get(c.get("intermediate"))
    return shard_tp is not None and (req.tp is None or shard_tp == req.tp)


def measured_activation(c: EvidenceCell) -> str:
    """The experts' activation a MoE cell ran with (the layer probe: gated SiLU, SwiGLU-OAI for MXFP4)."""
    act = (c.get("params") or {}).get("activation")
    return str(act) if act else ("swigluoai" if c.get("quant") == "mxfp4" else "silu")


def same_activation(c: EvidenceCell, req: Request) -> bool:
    moe = req.profile.moe
    return moe is None or measured_activation(c).replace("_no_mul", "") == moe.activation


def _report_fits(c: EvidenceCell, req: Request, role: str) -> bool:
    if c.kind == "engine":
        only_moe = c.get("moe_backend") and not c.get("attention_backend")
        return role == "moe" and bool(only_moe) and report_match.relevant(c, req)
    return report_match.relevant(c, req)


def attention_relevant(c: EvidenceCell, req: Request) -> bool:
    if c.kind != "attention":
        return False
    if c.get("applies"):
        return report_match.relevant(c, req)
    if c.get("basis") == "vllm_check":
        return req.is_model(c.get("model")) and deploy_fits(c, req, "attention")
    backend = str(c.get("attention_backend") or c.get("backend") or "")
    if ("MLA" in backend.upper()) != req.mla:
        return False
    if c.get("head_dim") is not None:  # the kernel cares about the head size; head counts vary by TP
        sizes = {k.head_size for k in req.profile.layer_kinds()} or {req.profile.head_dim}
        return c.get("head_dim") in sizes
    if c.get("model"):
        return req.is_model(c.get("model"))
    return True


def engine_relevant(c: EvidenceCell, req: Request) -> bool:
    if c.get("applies"):
        return c.kind == "engine" and _quant_ok(c.get("quant"), req.quant) and report_match.relevant(c, req)
    return (
        c.kind == "engine"
        and req.is_model(c.get("model"))
        and _quant_ok(c.get("quant"), req.quant)
        and layout_fits(c, req)
    )


@dataclass(frozen=True)
class Relevant:
    """The cells (for the asked GPU) that concern the request, per role."""

    moe: list[EvidenceCell]
    attention: list[EvidenceCell]
    engine: list[EvidenceCell]

    @property
    def all(self) -> list[EvidenceCell]:
        return self.moe + self.attention + self.engine


def relevant_cells(mine: list[EvidenceCell], req: Request, cat: BackendCatalog) -> Relevant:
    return Relevant(
        [c for c in mine if moe_relevant(c, req, cat)],
        [c for c in mine if attention_relevant(c, req)],
        [c for c in mine if engine_relevant(c, req)],
    )


# ------------------------------------------------------------------ choices per role


def _group(cells: list[EvidenceCell], key: str) -> dict[tuple[str, int | None], list[EvidenceCell]]:
    groups: dict[tuple[str, int | None], list[EvidenceCell]] = {}
    for c in cells:
        b = c.get(key) or c.get("backend")
        if b:
            fa = c.get("fa_version") if key == "attention_backend" else None
            groups.setdefault((str(b), fa), []).append(c)
    return groups


def _condemned(ok: list[EvidenceCell], bad: list[EvidenceCell], basis: str) -> bool:
    """Failures that rule a backend out despite cells that say it works."""
    if any(c.get("outcome") == "wrong_output" for c in bad):
        return True
    measured_bad = any(c.evidence == "measured" for c in bad)
    if basis == "measured" and measured_bad and not any(c.evidence == "measured" for c in ok):
        return True  # a measured failure outweighs anything but a measured success (e.g. at another TP)
    return basis == "fallback" and any(c.evidence == "reported" for c in bad)


def _timing(cells: list[EvidenceCell], metric: str) -> list[float]:
    return [
        c.cell["timings"][metric]
        for c in cells
        if isinstance((c.get("timings") or {}).get(metric), (int, float))
    ]


def choices(cells: list[EvidenceCell], key: str, metric: str, basis: str) -> list[Choice]:
    """The backends (``key``: moe_backend / attention_backend, with FA version) the cells show working."""
    groups = _group(cells, key)
    out = []
    for (b, fa), group in groups.items():
        # an FA-version-less failure of FLASH_ATTN does not condemn a specific FA version that worked
        if fa is None and key == "attention_backend" and any(k[0] == b and k[1] is not None for k in groups):
            continue
        ok = [c for c in group if c.ok and (basis == "fallback" or c.evidence == "measured")]
        bad = [c for c in group if c.failed]
        if key == "attention_backend" and fa is not None:
            versionless = groups.get((b, None), [])
            bad += [c for c in versionless if c.failed]
            ok += [c for c in versionless if c.ok and c.evidence == "predicted" and basis == "fallback"]
        if not ok or _condemned(ok, bad, basis):
            continue
        times, tps = _timing(ok, metric), _timing(ok, "tokens_per_s")
        out.append(Choice(b, fa, ok, bad, min(times) if times else None, max(tps) if tps else None))
    return out


# ------------------------------------------------------------------ candidate pairs


def failed_pair_keys(engine: list[EvidenceCell], basis: str) -> set[tuple[Any, Any, ArgsKey]]:
    """(moe, attention, engine args) of engine runs that failed (measured ones, unless predicting)."""
    return {
        (c.get("moe_backend"), c.get("attention_backend"), args_key(c.get("engine_args")))
        for c in engine
        if c.failed and (basis == "fallback" or c.evidence == "measured")
    }


def engine_pairs(engine: list[EvidenceCell], req: Request, basis: str) -> list[Pair]:
    """Pairs an end-to-end engine run showed working, scored by its tokens/s."""
    pairs: list[Pair] = []
    for c in engine:
        if not c.ok or not c.get("attention_backend") or (req.experts and not c.get("moe_backend")):
            continue
        if basis == "measured" and c.evidence != "measured":
            continue
        tps = (c.get("timings") or {}).get("tokens_per_s")
        score = float(tps) if isinstance(tps, (int, float)) else None
        args = dict(c.get("engine_args") or {})
        pairs.append(
            Pair(c.get("moe_backend"), c.get("attention_backend"), c.get("fa_version"), args, score,
                 "tokens_per_s", True, [c])
        )  # fmt: skip
    return pairs


def one_gpu_scores(pairs: list[Pair], gpu_name: str) -> list[Pair]:
    """Pairs whose speeds may be compared: the scores of runs on the answer's GPU (else on the GPU with
    the most scored runs); runs on another GPU of the same compute capability keep no score."""
    from collections import Counter
    from dataclasses import replace

    names = Counter(p.cells[0].gpu_name for p in pairs if p.score is not None)
    if not names or len(names) == 1:
        return pairs
    keep = gpu_name if gpu_name in names else names.most_common(1)[0][0]
    return [p if p.score is None or p.cells[0].gpu_name == keep else replace(p, score=None) for p in pairs]


def _kernel_pair(m: Choice | None, a: Choice, req: Request) -> Pair:
    score, higher, metric = None, False, KERNEL_METRIC
    if (m is None or m.ms is not None) and a.ms is not None:
        moe_ms = m.ms * req.moe_layers if m and m.ms is not None else 0.0
        score = moe_ms + a.ms * req.profile.attention_layers
    elif m is not None and m.tps is not None:
        score, higher, metric = m.tps, True, MOE_ONLY_METRIC
    cells = (m.ok_cells if m else []) + a.ok_cells
    return Pair(m.backend if m else None, a.backend, a.fa_version, {}, score, metric, higher, cells)


def kernel_pairs(
    moe: list[Choice], attention: list[Choice], req: Request, failed: set[tuple[Any, Any, ArgsKey]]
) -> list[Pair]:
    """Every working MoE backend x every working attention backend (kernel-level evidence)."""
    pairs: list[Pair] = []
    moes: list[Choice | None] = list(moe) if req.experts else [None]
    for m in moes:
        if m and (m.backend, None, ()) in failed:
            continue
        for a in attention:
            if m and (m.backend, a.backend, ()) in failed:
                continue
            pairs.append(_kernel_pair(m, a, req))
    return pairs


# ------------------------------------------------------------------ ranking


@dataclass(frozen=True)
class Preferences:
    """What breaks ties: backends vLLM only falls back to, and vLLM's own auto-selection order."""

    last_resort: frozenset[str]
    moe_order: list[str]
    attention_order: list[str]

    @classmethod
    def of(cls, cat: BackendCatalog, req: Request) -> Preferences:
        prio = cat.vllm.auto_priority
        return cls(
            frozenset(b.name for b in cat.records("moe") if b.vllm.last_resort),
            prio.get("moe", {}).get(req.quant, []),
            prio.get("attention_mla" if req.mla else "attention", []),
        )


def _position(seq: list[str], name: Any) -> int:
    return seq.index(name) if name in seq else len(seq)


def _role(c: EvidenceCell) -> str:
    return "attention" if c.kind == "attention" else "moe"


def ranking_weight(c: EvidenceCell) -> int:
    """A cell's evidence rank for ranking pairs: a field report that a backend works on another model
    weighs no more than vLLM's own check (it must not displace vLLM's pick on its own)."""
    if c.evidence == "reported" and c.ok and c.get("this_model") is False:
        return EVIDENCE_RANK["predicted"]
    return EVIDENCE_RANK[c.evidence]


def pair_rank(p: Pair, prefs: Preferences) -> PairRank:
    per_role: dict[str, int] = {}
    for c in p.cells:
        per_role[_role(c)] = max(per_role.get(_role(c), 0), ranking_weight(c))
    best_cells = [c for c in p.cells if ranking_weight(c) >= per_role[_role(c)]]
    s = p.score if p.score is not None else 0.0
    # only a run (measured here, or in a field report) that was degraded counts against a pair; a
    # prediction that a backend compiles at first use is a fact of the image, said in the answer,
    # never a blanket penalty
    degraded_run = any(c.get("degraded") and c.evidence in ("measured", "reported") for c in best_cells)
    return PairRank(
        last_resort=1 if p.moe in prefs.last_resort else 0,
        evidence=-min(per_role.values(), default=0),
        clean=0 if degraded_run else -1,
        unscored=0 if p.score is not None else 1,
        score=-s if p.higher_better else s,
        moe_priority=_position(prefs.moe_order, p.moe),
        attention_priority=_position(prefs.attention_order, p.attn),
        moe_name=str(p.moe),
        attention_name=p.attn,
    )


def runner_up(pairs: list[Pair]) -> Pair | None:
    """The best pair after ``pairs[0]`` that differs from it (in the MoE backend alone when the
    best pair's score speaks only of the MoE backend)."""
    best = pairs[0]
    moe_only = best.metric == MOE_ONLY_METRIC
    for p in pairs[1:]:
        if (p.moe != best.moe) if moe_only else (p.key != best.key):
            return p
    return None


def rank_reason(best: Pair, other: Pair, prefs: Preferences) -> str:
    """Why ``other`` ranks below ``best``, in words (the first field of the rank that differs)."""
    a, b = pair_rank(best, prefs), pair_rank(other, prefs)
    if b.last_resort > a.last_resort:
        return "vLLM only falls back to it"
    if b.evidence > a.evidence:
        return "its evidence is weaker (" + ", ".join(sorted({c.evidence for c in other.cells})) + ")"
    if b.clean > a.clean:
        runs = [c for c in other.cells if c.get("degraded") and c.evidence in ("measured", "reported")]
        why = [r for c in runs for r in (c.get("degraded_reasons") or ["degraded"])]
        return "a run of it was degraded: " + "; ".join(dict.fromkeys(why))[:200]
    if b.unscored > a.unscored:
        return "it has no timings to compare"
    if b.score != a.score and best.score is not None and other.score is not None:
        return f"slower ({best.metric}: {other.score:g} vs {best.score:g})"
    return "vLLM's own order puts it later"
