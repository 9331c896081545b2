"""How the answer explains itself: the cells it cites, each half's basis, the runner-up, every backend it
ruled out with the reason (one line per backend), and ``--why-not`` for one backend."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from probe.recommend import report_match
from probe.recommend.halves import Half
from probe.recommend.types import Choice, EvidenceCell, Pair, Request

if TYPE_CHECKING:
    from probe.recommend.types import EvidenceEntry, HalfBasis, RuledOut, RunnerUp, Speed


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


def where(c: EvidenceCell) -> str | None:
    """vLLM's file:line of an oracle refusal."""
    d = c.get("details") or {}
    return f"{d['file']}:{d['line']}" if c.get("basis") == "vllm_check" and d.get("file") else None


def note(c: EvidenceCell, req: Request, chosen: dict[str, Choice]) -> str | None:
    if c.evidence == "reported":
        return report_match.scope(c, req)
    choice = chosen.get("attention" if c.kind == "attention" else "moe")
    if choice is not None and c in choice.ok_cells and choice.note:
        return choice.note
    return where(c)


def cited_evidence(
    best: Pair, req: Request, ruled: list[EvidenceCell], chosen: dict[str, Choice]
) -> list[EvidenceEntry]:
    """The chosen cells, then the failures of other backends that ruled them out."""
    roles = {"moe": "moe", "attention": "attention"}
    ev = [cited(c, roles.get(c.kind, "engine"), note(c, req, chosen)) for c in best.cells]
    return ev + [cited(c, "ruled_out", note(c, req, chosen)) for c in ruled if c not in best.cells]


def comparison(best: Pair, runner: Pair | None) -> tuple[RunnerUp | None, Speed | None]:
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


def chosen_choices(best: Pair, moe: Half | None, attn: Half | None) -> dict[str, Choice]:
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


def halves_basis(best: Pair, chosen: dict[str, Choice]) -> dict[str, HalfBasis]:
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


def overall(halves: dict[str, HalfBasis]) -> str:
    kinds = {h["basis"].split("_")[0] for h in halves.values()}
    if kinds == {"measured"}:
        return "measured"
    return "measured+predicted" if "measured" in kinds else "predicted+reported"


_SOURCE_RANK = {"measured": 0, "reported": 1, "predicted": 2}


def _backend_of(c: EvidenceCell) -> tuple[str, str, int | None]:
    """(role, backend, FA version) a ruled-out cell speaks of (an engine run: its MoE backend when it
    names no attention backend, else its pair)."""
    if c.kind == "attention":
        return "attention", str(c.get("attention_backend") or c.get("backend")), c.get("fa_version")
    if c.kind == "engine":
        moe, attn = c.get("moe_backend"), c.get("attention_backend")
        if attn:
            return "engine", f"{moe or 'auto'}+{attn}", c.get("fa_version")
        return "moe", str(moe), None
    return "moe", str(c.get("moe_backend") or c.get("backend")), None


def _link(c: EvidenceCell) -> str | None:
    if c.evidence == "reported":
        return c.get("citation")
    return where(c) or (c.source if c.evidence == "measured" else None)


_NOT_FOR_QUANT = re.compile(r"is not supported for \S+ MoE\. Expected one of")


def applies_to(role: str, backend: str, reason: str, req: Request) -> bool:
    """Whether ruling ``backend`` out says something about this model on NVIDIA: a MoE backend that takes
    the model's quant on one CUDA GPU (an expert-parallel one with ``--ep``), an attention backend the
    catalog covers. vLLM refusing a backend for the quant itself ("not supported for NvFP4 MoE") or a
    ROCm-only backend is noise there (``--verbose`` and ``--json`` keep them)."""
    from probe.catalog.backends import catalog

    cat = catalog()
    if role == "attention":
        return cat.gap("attention", backend) is None
    rec = cat.find("moe", backend)
    if rec is None or _NOT_FOR_QUANT.search(reason) or req.quant not in rec.vllm.quants:
        return rec is None and not _NOT_FOR_QUANT.search(reason)
    if rec.vllm.platform != "cuda":
        return False
    return not rec.vllm.expert_parallel_only or req.deploy.ep


def _reason(c: EvidenceCell, basis: str) -> str:
    """The strongest reason in words: an ELF scan's missing code says so for the image and the GPU."""
    text = str(c.get("root_cause") or c.get("outcome"))
    if basis == "elf_scan" and c.get("outcome") == "no_kernel_image":
        what = text.split(":", 1)[0]
        return f"no sm_{c.get('gpu_sm')} kernel in this image ({what})"
    kin_of = (c.get("applies") or {}).get("kin_of")
    return f"on sm_{kin_of}, a family sibling (the same kernels): {text}" if kin_of else text


def ruled_out_backends(
    ruled: list[EvidenceCell], chosen: set[tuple[str, str]], req: Request | None = None
) -> list[RuledOut]:
    """One line per backend the answer ruled out, with its strongest reason (a measurement, then a
    field report, then vLLM's check or the ELF scan), where to read more, and whether it ``applies`` to
    the request (:func:`applies_to`)."""
    best: dict[tuple[str, str, int | None], EvidenceCell] = {}
    for c in ruled:
        key = _backend_of(c)
        if (key[0], key[1]) in chosen or key[1] in ("None", "auto", ""):
            continue
        have = best.get(key)
        if have is None or _SOURCE_RANK[c.evidence] < _SOURCE_RANK[have.evidence]:
            best[key] = c
    out: list[RuledOut] = []
    for (role, backend, fa), c in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        basis = c.get("basis") or c.evidence
        out.append(
            {
                "role": role,
                "backend": backend,
                "fa_version": fa,
                "outcome": str(c.get("outcome")),
                "reason": _reason(c, basis)[:300],
                "source": "vllm_check"
                if basis == "vllm_check"
                else c.evidence
                if basis != "elf_scan"
                else basis,
                "vllm": c.vllm,
                "link": _link(c),
                "applies": req is None or applies_to(role, backend, str(c.get("root_cause") or ""), req),
            }
        )
    return out


def departures(
    picks: dict[str, str | None], chosen: dict[str, str | None], ruled: list[RuledOut], ranked: dict[str, str]
) -> list[str]:
    """Why the answer departs from what vLLM's own ``auto`` picks for this model on this GPU: a reason
    from the evidence, always printed (never a silent preference). ``ranked``: per role, why the pick's
    best pair ranked lower (:func:`probe.recommend.select.rank_reason`)."""
    out: list[str] = []
    for role, pick in picks.items():
        got = chosen.get(role)
        if not pick or not got or pick == got or got == "auto":  # "auto": vLLM picks, the pick is its own
            continue
        against = next(  # a refusal of one FA version is not one of the backend vLLM picks
            (r for r in ruled if r["role"] == role and r["backend"] == pick and r["fa_version"] is None), None
        )
        if against is not None:
            why = f"ruled out ({against['source']}): {against['reason'][:200]}"
        else:
            why = ranked.get(role) or f"{pick} has no evidence of working here that {got} has"
        out.append(f"vLLM's own pick for the {role} half here is {pick}, not {got}: {why}")
    return out


def why_not(
    backend: str,
    role: str,
    chosen: dict[str, str | None],
    ruled: list[RuledOut],
    notes: list[str],
    ranking: str | None = None,
    below: str | None = None,
) -> list[str]:
    """The evidence against one backend, in words: what ruled it out, else why it ranked below the
    answer (``below``: :func:`probe.recommend.select.rank_reason`), else "nothing against it"."""
    if chosen.get(role) == backend:
        return [f"{backend} is the answer's {role} backend"]
    against = [r for r in ruled if r["backend"] == backend]
    if against:
        return [
            f"{r['source']}: {r['outcome']}: {r['reason']}" + (f" [{r['link']}]" if r.get("link") else "")
            for r in against
        ]
    first = chosen.get(role)
    ranked = f"; the answer's {role} backend {first} ranks first: {ranking}" if first and ranking else ""
    if below:
        return [f"not ruled out, but it ranks below {first}: {below}{ranked}", *notes]
    return [f"nothing against it: {backend} is not ruled out{ranked}", *notes]


def _measured_pick(best: Pair, role: str) -> str | None:
    """What vLLM picked for ``auto`` in a measured engine run of the pair (``details.engine``)."""
    for c in best.cells:
        layers = ((c.get("details") or {}).get("engine") or {}).get(role) or {}
        for layer in layers.values():
            picked = layer.get("selected_backend") if role == "moe" else layer.get("backend")
            if picked:
                fa = layer.get("fa_version") if role == "attention" else None
                name = str(picked).lower() if role == "moe" else str(picked)
                return name + (f" (FA{fa})" if fa else "")
    return None


def resolved(best: Pair, picks: dict[str, str | None]) -> dict[str, str | None]:
    """Per role, what the answer's backend is here: itself, or for ``auto`` what vLLM picks (its own
    log in a measured engine run of the pair, else its checks)."""
    out: dict[str, str | None] = {}
    for role, chosen in (("moe", best.moe), ("attention", best.attn)):
        if chosen == "FLASH_ATTN" and not best.fa:  # which FA version vLLM takes here
            picked = _measured_pick(best, role)
            out[role] = picked if picked and picked.startswith(chosen) else chosen
        elif chosen and chosen != "auto":
            out[role] = chosen + (f" (FA{best.fa})" if role == "attention" and best.fa else "")
        elif chosen == "auto":
            out[role] = _measured_pick(best, role) or picks.get(role)
    return out
