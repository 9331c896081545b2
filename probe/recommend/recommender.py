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

from probe.catalog import models as catalog_models
from probe.catalog.backends import BackendCatalog, catalog
from probe.catalog.profile import ModelProfile
from probe.recommend import (
    cautions,
    distance,
    explain,
    halves,
    images,
    layout,
    needs,
    report_match,
    select,
    verdict,
)
from probe.recommend.answer_version import ScanFacts, read_scan, scan_facts
from probe.recommend.gather import AskedCells, about, family_runs, gather
from probe.recommend.halves import Half
from probe.recommend.sources import default_matrix_paths
from probe.recommend.spelling import deployment_flags, engine_arg_flags, spell_flags
from probe.recommend.types import (
    Deployment,
    EvidenceCell,
    LoadedEvidence,
    Pair,
    Recommendation,
    Request,
    args_key,
    unique_cells,
)


def model_profile(model: str, quant: str | None) -> ModelProfile:
    """The profile asked for, in the quant asked for (else the one its name selects, else its default)."""
    hit = catalog_models.find(model)
    if hit is None:  # a config / folder / cached HF id (unknown: UsageError); read only then
        from probe.modelcfg.resolve import resolve_model

        hit = (resolve_model(model), None)
    prof, named_quant = hit
    return replace(prof, quant=quant or named_quant or prof.quant)


def _engine_pairs(
    rel: select.Relevant, req: Request, basis: str, warnings: list[str], gpu_name: str
) -> list[Pair]:
    """Engine runs of this model that worked (minus failed ones) at the asked layout: ``--tp N`` /
    ``--dp N`` runs for a multi-GPU question (with ``--ep``, those with expert parallelism), single-GPU
    runs for a single-GPU one; with no run at the asked layout, the single-GPU runs (said in a warning).
    Speeds are compared within one GPU: scores of runs on another GPU name than the answer's are
    dropped."""
    failed = select.failed_pair_keys(rel.engine, basis)
    pairs = [
        p
        for p in select.engine_pairs(rel.engine, req, basis)
        if (p.moe, p.attn, args_key(p.args)) not in failed
    ]
    if basis == "measured":
        pairs = layout.at_layout(pairs, req, warnings)
    return select.one_gpu_scores(pairs, gpu_name)


def _gpu_count_warnings(best: Pair, req: Request) -> list[str]:
    counts = sorted({c.gpu_count for c in best.cells if c.gpu_count})
    if not req.tp or not counts or counts[0] >= req.tp:
        return []
    return [
        f"the evidence came from a run on {counts[0]} GPU(s) (provenance.gpu.count), fewer than the "
        f"{req.tp} GPUs of tensor parallelism asked for"
    ]


@dataclass(frozen=True)
class _Context:
    """The cells an answer draws on: about this GPU (``mine``), engine runs of the model's family on
    any GPU read (``family``), and the distributions a scan of the image saw (None: no scan)."""

    mine: list[EvidenceCell]
    family: list[EvidenceCell]
    scanned: frozenset[str] | None
    report_files: list[str] | None = None
    checks: str | None = None  # the vLLM whose published checks the answer uses (nearest to its own)


@dataclass(frozen=True)
class _Ladder:
    moe: Half | None
    attn: Half | None
    ruled: list[EvidenceCell]


def _answer(
    base: Recommendation,
    req: Request,
    ctx: _Context,
    ladder: _Ladder,
    pairs: list[Pair],
    warnings: list[str],
) -> Recommendation:
    """The recommendation for the best-ranked pair, with flags, evidence, runner-up and warnings."""
    cat = catalog()
    mine = ctx.mine
    prefs = _preferences(cat, req, mine)
    pairs = sorted(pairs, key=lambda p: select.pair_rank(p, prefs))
    best = pairs[0]
    vllm = req.vllm
    if not vllm:
        warnings.append(f"no vLLM version known; flags are spelled for vLLM {cat.vllm.latest_known}")
    args, env, flag_warnings = spell_flags(best.moe, best.attn, best.fa, req.quant, vllm)
    runner, speed = explain.comparison(best, select.runner_up(pairs))
    chosen = explain.chosen_choices(best, ladder.moe, ladder.attn)
    halves = explain.halves_basis(best, chosen)
    warnings += flag_warnings + cautions.predictions_and_reports(mine, best, req)
    picks = _auto_picks(req, mine)
    res = explain.resolved(best, picks)
    warnings += cautions.disagreeing_reports(mine, best, ladder.ruled, req, res.get("moe"))
    warnings += (
        cautions.other_model_reports(mine, best, req)
        + cautions.degraded(best)
        + _gpu_count_warnings(best, req)
    )
    ruled_out = explain.ruled_out_backends(ladder.ruled, _chosen_keys(best), req)
    a2a_ruled, a2a_notes = layout.all2all_ruled_out(mine, req)
    ruled_out += a2a_ruled
    roles = {"moe": best.moe, "attention": best.attn}
    need = needs.needs(best, req, mine, ctx.family, ctx.scanned)
    fix = needs.report_workarounds(best, req, report_match.request_features(req), ctx.report_files, res)
    env = {**env, **fix.env}
    warnings += explain.departures(picks, roles, ruled_out, _rank_reasons(pairs, picks, prefs))
    for role, h in halves.items():
        if picks.get(role) and picks[role] == h["backend"]:
            h["text"] += "; " + _own_pick_words(req.vllm, ctx.checks)
    served = args + deployment_flags(req.tp, req.deploy) + engine_arg_flags({**best.args, **need.engine_args})
    return replace(
        base,
        basis=explain.overall(halves),
        moe_backend=best.moe,
        attention_backend=best.attn,
        fa_version=best.fa,
        moe_backend_resolved=res.get("moe"),
        attention_backend_resolved=res.get("attention"),
        engine_args={**best.args, **need.engine_args},
        flags=_joined(served, fix.flags),
        needs=need.lines + fix.lines,
        env=env,
        evidence=explain.cited_evidence(best, req, ladder.ruled, chosen),
        ruled_out=ruled_out,
        speed=speed,
        runner_up=runner,
        halves=halves,
        ranked_below=_ranked_below(pairs, prefs),
        warnings=list(dict.fromkeys(warnings)),
        notes=[*base.notes, *a2a_notes],
    )


def _rank_reasons(
    pairs: list[Pair], picks: dict[str, str | None], prefs: select.Preferences
) -> dict[str, str]:
    """Per role: why the best pair using vLLM's own pick ranked below the answer."""
    out: dict[str, str] = {}
    for role, pick in picks.items():
        mine = [p for p in pairs if (p.moe if role == "moe" else p.attn) == pick]
        if pick and mine and mine[0] is not pairs[0]:
            out[role] = select.rank_reason(pairs[0], mine[0], prefs)
    return out


def _ranked_below(pairs: list[Pair], prefs: select.Preferences) -> dict[str, str]:
    """Per backend that is not in the best pair: why its best pair ranked below the answer."""
    best, out = pairs[0], {}
    for p in pairs[1:]:
        for name, mine in ((p.moe, best.moe), (p.attn, best.attn)):
            if name and name != mine and name not in out:
                out[name] = select.rank_reason(best, p, prefs)
    return out


def _auto_picks(req: Request, mine: list[EvidenceCell]) -> dict[str, str | None]:
    """What vLLM's own ``auto`` picks for this model on this GPU, per half (the oracle's cells)."""
    picks = {"attention": verdict.auto_pick(verdict.oracle_cells(mine, req, "attention"))}
    if req.experts:
        picks["moe"] = verdict.auto_pick(verdict.oracle_cells(mine, req, "moe"))
    return picks


def _joined(flags: list[str], extra: tuple[str, ...]) -> list[str]:
    """``flags`` then the ``extra`` flags it does not already hold (a flag and its value stay together)."""
    out = list(flags)
    i = 0
    while i < len(extra):
        item = (
            list(extra[i : i + 2]) if i + 1 < len(extra) and not extra[i + 1].startswith("--") else [extra[i]]
        )
        if not any(out[j : j + len(item)] == item for j in range(len(out))):
            out += item
        i += len(item)
    return out


def _chosen_keys(best: Pair) -> set[tuple[str, str]]:
    keys = {("attention", best.attn), ("engine", f"{best.moe or 'auto'}+{best.attn}")}
    return keys | ({("moe", best.moe)} if best.moe else set())


def _preferences(cat: BackendCatalog, req: Request, mine: list[EvidenceCell]) -> select.Preferences:
    """vLLM's own auto order, with what its ``auto`` picks for this model here (the oracle) first."""
    prefs = select.Preferences.of(cat, req)
    moe = verdict.auto_pick(verdict.oracle_cells(mine, req, "moe"))
    attn = verdict.auto_pick(verdict.oracle_cells(mine, req, "attention"))
    return replace(
        prefs,
        moe_order=([moe] if moe else []) + prefs.moe_order,
        attention_order=([attn] if attn else []) + prefs.attention_order,
    )


def _nothing_works(
    base: Recommendation,
    req: Request,
    ctx: _Context,
    rel: select.Relevant,
    ladder: _Ladder,
    warnings: list[str],
) -> Recommendation:
    """Exit 3: no backend works for a half, with the evidence that ruled each one out — or, where vLLM's
    checks were never asked and nothing was measured, that there is nothing to go on."""
    failed = ladder.ruled
    evidence = [explain.cited(c, "failed", explain.where(c) or report_match.scope(c, req)) for c in failed][
        :40
    ]
    texts = []
    for h in (ladder.moe, ladder.attn):
        if h is None or h.choices:
            continue
        what = f"the {h.role} half of {req.name} ({req.quant}) on sm_{req.sm}"
        measured = any(c.evidence == "measured" for c in (rel.moe if h.role == "moe" else rel.attention))
        if not verdict.oracle_cells(ctx.mine, req, h.role) and not measured:
            texts.append(
                f"no evidence for {what}: vLLM {req.vllm or ''}'s checks were not asked for it and nothing "
                "was measured at its shape (ask that vLLM now with `--ask-vllm PYTHON`, or `probe run` on "
                "the GPU)"
            )
        else:
            texts.append(f"no working {h.role} backend for {req.name} ({req.quant}) on sm_{req.sm}")
    if not texts:
        texts = [f"no working pair for {req.name} ({req.quant}) on sm_{req.sm}" if rel.all or failed
                 else cautions.nothing_works(rel, req)]  # fmt: skip
    ruled_out = explain.ruled_out_backends(failed, set(), req)
    return replace(base, evidence=evidence, ruled_out=ruled_out, warnings=[*warnings, *texts])


def recommend(
    model: str,
    *,
    matrices: list[Path] | None = None,
    gpu: str | None = None,
    quant: str | None = None,
    tp: int | None = None,
    loaded: LoadedEvidence | None = None,
    vllm: str | None = None,
    scan: Path | None = None,
    deploy: Deployment | None = None,
    why_not: str | None = None,
    asked: AskedCells | None = None,
    report_files: list[str] | None = None,
    image: str | None = None,
    python: str | None = None,
) -> Recommendation:
    """The recommendation for ``model`` on ``gpu`` (default: this machine's GPU, else the GPU the
    matrices were measured on), for one vLLM version (``vllm``, else the one of ``scan`` / ``image`` /
    ``python``, the installed one, the measured one, the newest predicted: :mod:`.answer_version`), for
    one image (:mod:`.images`), served as ``deploy`` says.

    ``loaded``: evidence already read (``probe diff`` passes one matrix's cells); else the matrix
    files under ``matrices`` (default :func:`default_matrix_paths`) plus the packaged field reports.
    """
    sources = _Sources(matrices, loaded, vllm, scan, asked, report_files, image, python)
    rec = _recommend(model, gpu, quant, tp, deploy, sources)
    if why_not:
        rec = replace(rec, why_not=_why_not(why_not, rec))
    return rec


def _why_not(backend: str, rec: Recommendation) -> list[str]:
    role = "attention" if backend.isupper() else "moe"
    chosen = {"moe": rec.moe_backend, "attention": rec.attention_backend}
    notes = [w for w in rec.warnings if backend in w]
    half = rec.halves.get(role)
    ranking = half["text"] if half else None
    below = rec.ranked_below.get(backend)
    return explain.why_not(backend, role, chosen, rec.ruled_out, notes, ranking, below)


@dataclass(frozen=True)
class _Sources:
    """Where the evidence comes from (see :func:`recommend`)."""

    matrices: list[Path] | None
    loaded: LoadedEvidence | None
    vllm: str | None
    scan: Path | None
    asked: AskedCells | None
    report_files: list[str] | None
    image: str | None = None  # --image: a wheel, image tarball / OCI layout, folder, or scan report
    python: str | None = None  # --python: that interpreter's environment is the image


def _image(src: _Sources) -> tuple[ScanFacts | None, images.Image | None]:
    """The image asked about: a scan report (``--scan``), one scanned now (``--image`` / ``--python``),
    else the environment probe runs in when it holds vLLM; and its scan facts when there is a scan."""
    if src.scan is not None:
        facts = read_scan(src.scan)
    elif src.image is not None or src.python is not None:
        from probe.catalog.gpus import catalog as gpu_catalog
        from probe.recommend.image_scan import scan_image

        facts = scan_facts(scan_image(src.image, src.python, list(gpu_catalog().gpus)))
    else:
        return None, images.running_image()
    label = str(src.scan or src.image or src.python)
    return facts, images.image_of(label, facts.versions)


def _recommend(
    model: str, gpu: str | None, quant: str | None, tp: int | None, deploy: Deployment | None, src: _Sources
) -> Recommendation:
    prof = model_profile(model, quant)
    paths = src.matrices if src.matrices is not None else default_matrix_paths()
    facts, image = _image(src)
    got = gather(
        paths,
        gpu,
        vllm=src.vllm,
        scan=facts,
        loaded=src.loaded,
        asked=src.asked,
        report_files=src.report_files,
    )
    req = Request.of(prof, prof.quant, tp, got.sm, got.version.vllm, deploy)
    mine = images.bind(about(got.loaded.cells, req), req, image)
    scanned = got.scan.packages if got.scan else None
    family = family_runs(got.loaded.cells, prof)
    ctx = _Context(mine, family, scanned, src.report_files, got.version.predictions)
    measured_here = any(c.evidence == "measured" for c in mine)
    basis = "measured" if measured_here else "fallback"
    cat = catalog()
    rel = select.relevant_cells(mine, req, cat)
    base = Recommendation(
        model=prof.name,
        quant=prof.quant,
        gpu=f"sm_{got.sm}",
        gpu_name=got.gpu_name,
        basis="measured" if measured_here else "predicted+reported",
        vllm_version=got.version.vllm,
        flags_for_vllm=got.version.vllm or cat.vllm.latest_known,
        notes=([got.version.note] if got.version.note else [])
        + ([] if measured_here else [distance.fallback_note(got.sm, mine, req, got.version.predictions)])
        + _measured_with(mine, req.vllm),
        matrices=got.loaded.files,
        image=image.label if image is not None else None,
    )
    warnings = cautions.every_engine_run_failed(rel, req)
    moe = halves.half(rel, mine, req, "moe", cat) if req.experts else None
    attn = halves.half(rel, mine, req, "attention", cat)
    ruled = [c for h in (moe, attn) if h is not None for c in h.ruled_out]
    ruled = unique_cells(ruled + [c for c in rel.all if c.failed and c.evidence != "predicted"])
    pairs = _engine_pairs(rel, req, basis, warnings, got.gpu_name)
    if pairs:  # an end-to-end run answers both halves; what the halves ruled out is still said
        return _answer(base, req, ctx, _Ladder(None, None, ruled), pairs, warnings)
    ladder = _Ladder(moe, attn, ruled)
    if measured_here and moe is not None and moe.basis != "measured":
        warnings += cautions.no_moe_shape(rel, req)
    failed = select.failed_pair_keys(rel.engine, basis)
    pairs = select.kernel_pairs(moe.choices if moe else [], attn.choices, req, failed)
    if not pairs:
        return _nothing_works(base, req, ctx, rel, ladder, warnings)
    return _answer(base, req, ctx, ladder, pairs, warnings)


def _own_pick_words(vllm: str | None, checks: str | None) -> str:
    """Whose pick the answer's backend is: the answer's vLLM's own checks, or the nearest published."""
    if checks and vllm and checks != vllm:
        return f"the pick of vLLM {checks}'s checks (the nearest to {vllm}) for this model here"
    return f"vLLM {vllm or checks or ''}'s own pick for this model here".replace(" 's", "'s")


def _measured_with(mine: list[EvidenceCell], vllm: str | None) -> list[str]:
    """A note when the measurements ran with another vLLM than the answer's."""
    ran = sorted({str(c.vllm) for c in mine if c.evidence == "measured" and c.vllm})
    if not ran or not vllm or ran == [vllm]:
        return []
    return [f"measured with vLLM {', '.join(ran)}; the flags are spelled for vLLM {vllm}"]
