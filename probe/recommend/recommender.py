"""Pick the fastest working MoE x attention pair for a model on a GPU, from the evidence.

Evidence order: ``measured`` cells for the GPU when any exist (field reports only add warnings);
otherwise static predictions plus field reports (``reported`` cells), and the answer says so.
The steps: evidence (:mod:`.evidence`) -> relevant cells, choices, pairs, ranking (:mod:`.select`)
-> flags for the vLLM version (:mod:`.flags`) -> warnings (:mod:`.warnings`). This is the fast
path of ``probe recommend`` (≤ 0.2 s as a whole process): no pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from probe.catalog import models as catalog_models
from probe.catalog.gpus import parse_target
from probe.catalog.profile import ModelProfile
from probe.errors import UsageError
from probe.recommend import select
from probe.recommend import warnings as warn
from probe.recommend.evidence import default_matrix_paths, load_evidence
from probe.recommend.flags import engine_arg_flags, flags_data, spell_flags
from probe.recommend.types import EvidenceCell, LoadedEvidence, Pair, Recommendation, Request, args_key

if TYPE_CHECKING:
    from probe.recommend.types import EvidenceEntry, RunnerUp, Speed


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
    return prof._replace(quant=quant or named_quant or prof.quant)


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
        raise UsageError(
            "the matrices hold measurements for several GPUs: " + ", ".join(f"sm_{s}" for s in measured),
            hint="pick one with --gpu",
        )
    raise UsageError(
        "no measured matrix found; say which GPU to predict for with --gpu (e.g. --gpu sm_110a)",
        hint=f"matrices searched: {', '.join(str(p) for p in paths) or '(none)'}",
    )


def cited(c: EvidenceCell, role: str) -> EvidenceEntry:
    """A cell as the answer cites it."""
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
    }


def _vllm_of(best: Pair, mine: list[EvidenceCell]) -> str | None:
    """The vLLM version to spell flags for: the chosen cells', else this GPU's measured, else predicted."""
    return (
        next((c.vllm for c in best.cells if c.vllm), None)
        or next((c.vllm for c in mine if c.vllm and c.evidence == "measured"), None)
        or next((c.vllm for c in mine if c.vllm and c.evidence == "predicted"), None)
    )


def _cited_evidence(best: Pair, rel: select.Relevant) -> list[EvidenceEntry]:
    """The chosen cells, then the failures of other backends that ruled them out."""
    roles = {"moe": "moe", "attention": "attention"}
    ev = [cited(c, roles.get(c.kind, "engine")) for c in best.cells]
    return ev + [cited(c, "ruled_out") for c in rel.all if c.failed and c not in best.cells]


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


def _candidate_pairs(rel: select.Relevant, req: Request, basis: str) -> list[Pair]:
    """Engine runs that worked, else every working MoE x attention combination; minus failed pairs."""
    failed = select.failed_pair_keys(rel.engine, basis)
    pairs = [
        p
        for p in select.engine_pairs(rel.engine, req, basis)
        if (p.moe, p.attn, args_key(p.args)) not in failed
    ]
    if pairs:
        return pairs
    moe = select.choices(rel.moe, "moe_backend", "forward_ms_b1", basis) if req.experts else []
    attention = select.choices(rel.attention, "attention_backend", "decode_ms", basis)
    return select.kernel_pairs(moe, attention, req, failed)


def _answer(base: Recommendation, req: Request, mine: list[EvidenceCell], rel: select.Relevant,
            pairs: list[Pair], basis: str, warnings: list[str]) -> Recommendation:  # fmt: skip
    """The recommendation for the best-ranked pair, with flags, evidence, runner-up and warnings."""
    fd = flags_data()
    prefs = select.Preferences.of(fd, req)
    pairs = sorted(pairs, key=lambda p: select.pair_rank(p, prefs))
    best = pairs[0]
    vllm = _vllm_of(best, mine)
    if not vllm:
        warnings.append(f"no vLLM version recorded; flags are spelled for vLLM {fd['latest_known']}")
    args, env, flag_warnings = spell_flags(best.moe, best.attn, best.fa, req.quant, vllm)
    runner, speed = _comparison(best, select.runner_up(pairs))
    warnings += flag_warnings + warn.predictions_and_reports(mine, best, req.sm)
    warnings += warn.disagreeing_reports(mine, best, rel, basis) + warn.other_model_reports(mine, best, req)
    warnings += warn.degraded(best)
    return base._replace(
        moe_backend=best.moe,
        attention_backend=best.attn,
        fa_version=best.fa,
        engine_args=best.args,
        vllm_version=vllm,
        flags_for_vllm=vllm or fd["latest_known"],
        flags=args + engine_arg_flags(best.args),
        env=env,
        evidence=_cited_evidence(best, rel),
        speed=speed,
        runner_up=runner,
        warnings=list(dict.fromkeys(warnings)),
    )


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
    if loaded is None:
        loaded = load_evidence(paths, parse_target(gpu).sm if gpu else None)
    sm, gpu_name = target_gpu(gpu, loaded.cells, paths)
    req = Request.of(prof, prof.quant, tp, sm)
    mine = [c for c in loaded.cells if c.get("gpu_sm") == sm]
    basis = "measured" if any(c.evidence == "measured" for c in mine) else "fallback"
    rel = select.relevant_cells(mine, req, flags_data())
    base = Recommendation(
        model=prof.name,
        quant=prof.quant,
        gpu=f"sm_{sm}",
        gpu_name=gpu_name,
        basis="measured" if basis == "measured" else "predicted+reported",
        notes=[] if basis == "measured" else [_fallback_note(sm)],
        matrices=loaded.files,
    )
    warnings = warn.no_moe_shape(rel, req) if basis == "measured" else []
    warnings += warn.every_engine_run_failed(rel, req)
    pairs = _candidate_pairs(rel, req, basis)
    if not pairs:
        failed = [cited(c, "failed") for c in rel.all if c.failed][:20]
        return base._replace(evidence=failed, warnings=[*warnings, warn.nothing_works(rel, req)])
    return _answer(base, req, mine, rel, pairs, basis, warnings)


def _fallback_note(sm: int) -> str:
    return (
        f"No measured matrix for sm_{sm}: this answer comes from static predictions and field "
        "reports, not from a run on this GPU. Run `probe run` on the GPU for measured evidence."
    )
