"""Pick the fastest working MoE x attention pair for a model on a GPU, from the best evidence.

Measured engine runs of the model win when there are any. Otherwise each half (MoE, attention)
answers from the best rung of its own evidence ladder (:mod:`.halves`: measured at this shape ->
measured at the nearest shape -> vLLM's own check + ELF scan + field reports (:mod:`.verdict`) ->
field reports), and the two halves combine; each names its basis. The steps: evidence
(:mod:`.evidence`) -> relevant cells (:mod:`.select`) -> engine pairs or the two halves -> pairs and
ranking (:mod:`.select`) -> flags for the vLLM version (:mod:`.flags`) -> warnings
(:mod:`.warnings`). This is the fast path of ``probe recommend`` (≤ 0.2 s as a whole process): no
pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.catalog import models as catalog_models
from probe.catalog.gpus import parse_target
from probe.catalog.profile import ModelProfile
from probe.errors import OptionError, UsageError
from probe.outcomes import unknown
from probe.recommend import cautions, halves, reports, select, verdict
from probe.recommend.flags import engine_arg_flags, flags_data, spell_flags
from probe.recommend.halves import Half
from probe.recommend.sources import default_matrix_paths, load_evidence
from probe.recommend.types import (
    Choice,
    EvidenceCell,
    LoadedEvidence,
    Pair,
    Recommendation,
    Request,
    args_key,
    unique_cells,
)

if TYPE_CHECKING:
    from probe.recommend.types import EvidenceEntry, HalfBasis, RunnerUp, Speed


def model_profile(model: str, quant: str | None) -> ModelProfile:
    """The profile asked for, in the quant asked for (else the one its name selects, else its default)."""
    hit = catalog_models.find(model)
    if hit is None and not Path(model).expanduser().exists() and "/" not in model:
        close = catalog_models.closest_names(model)
        raise UsageError(
            f"unknown model {model!r}",
            hint=(f"did you mean: {', '.join(close)}?" if close else "run `probe models`")
            + " — or pass a config.json / model folder / cached HF id",
        )
    prof, named_quant = hit if hit is not None else (catalog_models.resolve_model(model), None)
    return replace(prof, quant=quant or named_quant or prof.quant)


def target_gpu(gpu: str | None, cells: list[EvidenceCell], paths: list[Path]) -> tuple[int, str]:
    """(sm, name) of the GPU asked for, else of the one GPU the matrices were measured on."""
    if gpu:
        target = parse_target(gpu)
        return target.sm, target.names[0]
    measured = sorted({c.get("gpu_sm") for c in cells if c.evidence == "measured" and c.get("gpu_sm")})
    if len(measured) == 1:
        sm = measured[0]
        name = next((c.gpu_name for c in cells if c.get("gpu_sm") == sm and c.gpu_name), None)
        return sm, name or parse_target(str(sm)).names[0]
    if measured:
        raise OptionError(
            "gpu",
            "the matrices hold measurements for several GPUs: " + ", ".join(f"sm_{s}" for s in measured),
            hint="pick one of them",
        )
    raise OptionError(
        "gpu",
        "no measured matrix found; say which GPU to predict for (e.g. sm_110a)",
        hint=f"matrices searched: {', '.join(str(p) for p in paths) or '(none)'}",
    )


def cited(c: EvidenceCell, role: str, note: str | None = None) -> EvidenceEntry:
    """A cell as the answer cites it (``note``: how it reaches this model)."""
    return {
        "role": role,
        "id": c.cell["id"],
        "outcome": c.cell["outcome"],
        "source": c.evidence,
        "file": c.source,
        "citation": c.get("citation"),
        "root_cause": c.get("root_cause"),
        "degraded": bool(c.get("degraded")),
        "timings": c.get("timings") or {},
        "note": note,
    }


def _where(c: EvidenceCell) -> str | None:
    """vLLM's file:line of an oracle refusal."""
    d = c.get("details") or {}
    return f"{d['file']}:{d['line']}" if c.get("basis") == "vllm_check" and d.get("file") else None


def _vllm_of(best: Pair, mine: list[EvidenceCell]) -> str | None:
    """The vLLM version to spell flags for: the chosen cells', else this GPU's measured, else predicted."""
    return (
        next((c.vllm for c in best.cells if c.vllm), None)
        or next((c.vllm for c in mine if c.vllm and c.evidence == "measured"), None)
        or next((c.vllm for c in mine if c.vllm and c.evidence == "predicted"), None)
    )


def _note(c: EvidenceCell, req: Request, chosen: dict[str, Choice]) -> str | None:
    if c.evidence == "reported":
        return reports.scope(c, req)
    choice = chosen.get("attention" if c.kind == "attention" else "moe")
    if choice is not None and c in choice.ok_cells and choice.note:
        return choice.note
    return _where(c)


def _cited_evidence(
    best: Pair, req: Request, ruled: list[EvidenceCell], chosen: dict[str, Choice]
) -> list[EvidenceEntry]:
    """The chosen cells, then the failures of other backends that ruled them out."""
    roles = {"moe": "moe", "attention": "attention"}
    ev = [cited(c, roles.get(c.kind, "engine"), _note(c, req, chosen)) for c in best.cells]
    return ev + [cited(c, "ruled_out", _note(c, req, chosen)) for c in ruled if c not in best.cells]


def _comparison(best: Pair, runner: Pair | None) -> tuple[RunnerUp | None, Speed | None]:
    if runner is None:
        return None, None
    label: RunnerUp = {
        "moe_backend": runner.moe,
        "attention_backend": runner.attn,
        "fa_version": runner.fa,
        "engine_args": runner.args,
    }
    if best.score is None or runner.score is None or best.metric != runner.metric:
        return label, None
    ratio = (best.score / runner.score) if best.higher_better else (runner.score / best.score)
    speed: Speed = {
        "metric": best.metric,
        "best": best.score,
        "runner_up": runner.score,
        "ratio": round(ratio, 3),
    }
    return label, speed


def _engine_pairs(rel: select.Relevant, req: Request, basis: str, warnings: list[str]) -> list[Pair]:
    """Engine runs of this model that worked (minus failed ones); with ``--tp N`` > 1, runs at TP=N
    first, else the single-GPU runs (TP emulated, said in a warning)."""
    failed = select.failed_pair_keys(rel.engine, basis)
    pairs = [
        p
        for p in select.engine_pairs(rel.engine, req, basis)
        if (p.moe, p.attn, args_key(p.args)) not in failed
    ]
    if req.tp and req.tp > 1 and basis == "measured":
        at_tp = [p for p in pairs if p.cells[0].get("tp") == req.tp]
        if at_tp:
            return at_tp
        warnings.append(
            f"no TP={req.tp} engine run of {req.name} on sm_{req.sm}: the answer is emulated from "
            f"single-GPU evidence (MoE kernels at I/{req.tp} per shard, attention per GPU)"
        )
    return pairs


def _gpu_count_warnings(best: Pair, req: Request) -> list[str]:
    counts = sorted({c.gpu_count for c in best.cells if c.gpu_count})
    if not req.tp or not counts or counts[0] >= req.tp:
        return []
    return [
        f"the evidence came from a run on {counts[0]} GPU(s) (provenance.gpu.count), fewer than the "
        f"{req.tp} GPUs of tensor parallelism asked for"
    ]


def _chosen(best: Pair, moe: Half | None, attn: Half | None) -> dict[str, Choice]:
    out: dict[str, Choice] = {}
    m = next((c for c in moe.choices if c.backend == best.moe), None) if moe else None
    a = (
        next((c for c in attn.choices if (c.backend, c.fa_version) == (best.attn, best.fa)), None)
        if attn
        else None
    )
    if m is not None:
        out["moe"] = m
    if a is not None:
        out["attention"] = a
    return out


def _halves(best: Pair, chosen: dict[str, Choice]) -> dict[str, HalfBasis]:
    """Each half's basis, in words: the rung of the ladder its backend came from."""
    if not chosen:  # an engine run: both halves seen together
        ev = "measured" if any(c.evidence == "measured" for c in best.cells) else "reported"
        text = f"{ev} end to end (engine run of this model)"
        both: dict[str, HalfBasis] = {"attention": {"backend": best.attn, "basis": ev, "text": text}}
        if best.moe:
            both["moe"] = {"backend": best.moe, "basis": ev, "text": text}
        return both
    words = {"measured": "measured at this model's shape"}
    return {
        role: {"backend": c.backend, "basis": c.basis, "text": c.note or words.get(c.basis, c.basis)}
        for role, c in chosen.items()
    }


def _overall(halves: dict[str, HalfBasis]) -> str:
    kinds = {h["basis"].split("_")[0] for h in halves.values()}
    if kinds == {"measured"}:
        return "measured"
    return "measured+predicted" if "measured" in kinds else "predicted+reported"


@dataclass(frozen=True)
class _Ladder:
    moe: Half | None
    attn: Half | None
    ruled: list[EvidenceCell]


def _answer(
    base: Recommendation,
    req: Request,
    mine: list[EvidenceCell],
    ladder: _Ladder,
    pairs: list[Pair],
    warnings: list[str],
) -> Recommendation:
    """The recommendation for the best-ranked pair, with flags, evidence, runner-up and warnings."""
    fd = flags_data()
    prefs = _preferences(fd, req, mine)
    pairs = sorted(pairs, key=lambda p: select.pair_rank(p, prefs))
    best = pairs[0]
    vllm = _vllm_of(best, mine)
    if not vllm:
        warnings.append(f"no vLLM version recorded; flags are spelled for vLLM {fd['latest_known']}")
    args, env, flag_warnings = spell_flags(best.moe, best.attn, best.fa, req.quant, vllm)
    runner, speed = _comparison(best, select.runner_up(pairs))
    chosen = _chosen(best, ladder.moe, ladder.attn)
    halves = _halves(best, chosen)
    warnings += flag_warnings + cautions.predictions_and_reports(mine, best, req)
    warnings += cautions.disagreeing_reports(mine, best, ladder.ruled, req)
    warnings += (
        cautions.other_model_reports(mine, best, req)
        + cautions.degraded(best)
        + _gpu_count_warnings(best, req)
    )
    return replace(
        base,
        basis=_overall(halves),
        moe_backend=best.moe,
        attention_backend=best.attn,
        fa_version=best.fa,
        engine_args=best.args,
        vllm_version=vllm,
        flags_for_vllm=vllm or fd["latest_known"],
        flags=args + engine_arg_flags(best.args),
        env=env,
        evidence=_cited_evidence(best, req, ladder.ruled, chosen),
        speed=speed,
        runner_up=runner,
        halves=halves,
        warnings=list(dict.fromkeys(warnings)),
    )


def _preferences(fd: dict[str, Any], req: Request, mine: list[EvidenceCell]) -> select.Preferences:
    """vLLM's own auto order, with what its ``auto`` picks for this model here (the oracle) first."""
    prefs = select.Preferences.of(fd, req)
    moe = verdict.auto_pick(verdict.oracle_cells(mine, req, "moe"))
    attn = verdict.auto_pick(verdict.oracle_cells(mine, req, "attention"))
    return replace(
        prefs,
        moe_order=([moe] if moe else []) + prefs.moe_order,
        attention_order=([attn] if attn else []) + prefs.attention_order,
    )


def _nothing_works(
    base: Recommendation, req: Request, rel: select.Relevant, ladder: _Ladder, warnings: list[str]
) -> Recommendation:
    """Exit 3: no backend works for a half, with the evidence that ruled each one out."""
    failed = ladder.ruled
    evidence = [cited(c, "failed", _where(c) or reports.scope(c, req)) for c in failed][:40]
    empty = [h.role for h in (ladder.moe, ladder.attn) if h is not None and not h.choices]
    what = " and ".join(f"no working {r} backend" for r in empty) or "no working pair"
    text = (
        f"{what} for {req.name} ({req.quant}) on sm_{req.sm}"
        if rel.all or failed
        else cautions.nothing_works(rel, req)
    )
    return replace(base, evidence=evidence, warnings=[*warnings, text])


def recommend(
    model: str,
    *,
    matrices: list[Path] | None = None,
    gpu: str | None = None,
    quant: str | None = None,
    tp: int | None = None,
    loaded: LoadedEvidence | None = None,
) -> Recommendation:
    """The recommendation for ``model`` on ``gpu`` (default: the GPU the matrices were measured on).

    ``loaded``: evidence already read (``probe diff`` passes one matrix's cells); else the matrix
    files under ``matrices`` (default :func:`default_matrix_paths`) plus the packaged field reports.
    """
    prof = model_profile(model, quant)
    paths = matrices if matrices is not None else default_matrix_paths()
    loaded, sm, gpu_name = _evidence(paths, gpu, loaded)
    req = Request.of(prof, prof.quant, tp, sm)
    mine = _mine(loaded.cells, req)
    measured_here = any(c.evidence == "measured" for c in mine)
    basis = "measured" if measured_here else "fallback"
    fd = flags_data()
    rel = select.relevant_cells(mine, req, fd)
    base = Recommendation(
        model=prof.name,
        quant=prof.quant,
        gpu=f"sm_{sm}",
        gpu_name=gpu_name,
        basis="measured" if measured_here else "predicted+reported",
        notes=[] if measured_here else [_fallback_note(sm)],
        matrices=loaded.files,
    )
    warnings = cautions.every_engine_run_failed(rel, req)
    pairs = _engine_pairs(rel, req, basis, warnings)
    if pairs:
        ruled = [c for c in rel.all if c.failed and c.evidence != "predicted"]
        return _answer(base, req, mine, _Ladder(None, None, ruled), pairs, warnings)
    moe = halves.half(rel, mine, req, "moe", fd) if req.experts else None
    attn = halves.half(rel, mine, req, "attention", fd)
    ruled = [c for h in (moe, attn) if h is not None for c in h.ruled_out]
    ruled = unique_cells(ruled + [c for c in rel.all if c.failed and c.evidence != "predicted"])
    ladder = _Ladder(moe, attn, ruled)
    if measured_here and moe is not None and moe.basis != "measured":
        warnings += cautions.no_moe_shape(rel, req)
    failed = select.failed_pair_keys(rel.engine, basis)
    pairs = select.kernel_pairs(moe.choices if moe else [], attn.choices, req, failed)
    if not pairs:
        return _nothing_works(base, req, rel, ladder, warnings)
    return _answer(base, req, mine, ladder, pairs, warnings)


def _mine(cells: list[EvidenceCell], req: Request) -> list[EvidenceCell]:
    """The cells about the asked GPU; of vLLM's own checks, only those about this model. Cells whose
    result is unknown (``not_run``, or stopped while JIT-compiling) are no evidence either way."""
    out = []
    for c in cells:
        d = c.cell
        if d.get("gpu_sm") != req.sm or unknown(d.get("outcome"), d.get("root_cause")):
            continue
        if d.get("basis") == "vllm_check" and not req.is_model(d.get("model")):
            continue
        out.append(c)
    return out


def _evidence(
    paths: list[Path], gpu: str | None, loaded: LoadedEvidence | None
) -> tuple[LoadedEvidence, int, str]:
    """The evidence and the GPU: with ``--gpu``, only that GPU's prediction files are read; without
    it, the GPU comes from the measured matrices and its prediction files are read next."""
    if loaded is not None:
        return (loaded, *target_gpu(gpu, loaded.cells, paths))
    asked = parse_target(gpu).sm if gpu else None
    loaded = load_evidence(paths, asked)
    sm, name = target_gpu(gpu, loaded.cells, paths)
    if asked is None:
        more = load_evidence(paths, sm, gpu_files_only=True, reports=False)
        loaded = LoadedEvidence(loaded.cells + more.cells, loaded.files + more.files)
    return loaded, sm, name


def _fallback_note(sm: int) -> str:
    return (
        f"No measured matrix for sm_{sm}: this answer comes from vLLM's own selection checks, static "
        "predictions and field reports, not from a run on this GPU. Run `probe run` on the GPU for "
        "measured evidence."
    )
