"""The parallel layout of an answer's engine runs, and the all2all backend of a DP + EP question.

An engine run speaks for a question at its own tensor-parallel size or on one GPU, and a data-parallel run
only at its DP size (:func:`layout_fits`); the answer's pairs come from runs at the asked layout
(:func:`at_layout`), else from single-GPU runs (said in a warning for a multi-GPU question).

The all2all backend (``recommend --dp N --ep``):
vLLM moves tokens between the expert-parallel ranks of a DP + EP deployment with one all2all backend
(``--all2all-backend``). ``probe run --engine-dp N`` measures one engine per backend; this module reads
those cells of the model on the answer's GPU: a backend whose engine failed there is ruled out (role
``all2all``), the ones that ran are named in a note, and nothing is said when the question is not
DP + EP or no such cell was measured (cells the image could not run are ``not_run``: no evidence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.recommend.types import EvidenceCell, Pair, Request

if TYPE_CHECKING:
    from probe.recommend.types import RuledOut


def cell_layout(c: EvidenceCell) -> tuple[int, int]:
    """(tensor-parallel size, data-parallel size) of an engine run."""
    return int(c.get("tp") or 1), int((c.get("params") or {}).get("data_parallel_size") or 1)


def layout_fits(c: EvidenceCell, req: Request) -> bool:
    """Whether an engine run speaks for the question: a data-parallel run only at the asked DP size; a
    tensor-parallel run at the asked TP size, or at any when none was asked (:func:`at_layout` prefers
    single-GPU runs then)."""
    tp, dp = cell_layout(c)
    if dp > 1 and dp != req.deploy.dp:
        return False
    return req.tp is None or tp in (1, req.tp)


def pair_layout(p: Pair) -> tuple[int, int]:
    """(tensor-parallel size, data-parallel size) of the run behind a pair."""
    return cell_layout(p.cells[0])


def at_layout(pairs: list[Pair], req: Request, warnings: list[str]) -> list[Pair]:
    """The pairs of runs at the asked (TP, DP) layout (with ``--ep``, preferring expert-parallel ones);
    with none there, those of single-GPU runs, said in a warning; a single-GPU question falls back to
    runs at any TP size when no single-GPU run worked."""
    want = (req.tp or 1, req.deploy.dp)
    at = [p for p in pairs if pair_layout(p) == want]
    if want == (1, 1):
        return at or pairs
    if at:
        return expert_parallel(at, req, warnings)
    shown = f"TP={want[0]}" + (f" x DP={want[1]}" if want[1] > 1 else "")
    how = "experts spread over the ranks" if want[1] > 1 else f"MoE kernels at I/{want[0]} per shard"
    warnings.append(
        f"no {shown} engine run of {req.name} on sm_{req.sm}: the answer is emulated from single-GPU "
        f"evidence ({how}, attention per GPU)"
    )
    return [p for p in pairs if pair_layout(p) == (1, 1)] or pairs


def expert_parallel(pairs: list[Pair], req: Request, warnings: list[str]) -> list[Pair]:
    """Of the runs at the asked layout, those with (``--ep``) or without expert parallelism, when there
    are."""
    ep = [p for p in pairs if (p.cells[0].get("params") or {}).get("enable_expert_parallel")]
    if not req.deploy.ep:
        return [p for p in pairs if p not in ep] or pairs
    if not ep:
        warnings.append(
            f"no TP={req.tp or 1} + expert-parallel engine run of {req.name} on sm_{req.sm}: the answer "
            f"comes from TP={req.tp or 1} runs without expert parallelism"
        )
    return ep or pairs


def _dp_cells(mine: list[EvidenceCell], req: Request) -> list[EvidenceCell]:
    """Measured DP + EP engine cells of the model at the asked DP size, each naming its all2all backend."""
    out = []
    for c in mine:
        params = c.get("params") or {}
        if c.kind != "engine" or c.evidence != "measured" or not req.is_model(c.get("model")):
            continue
        if int(params.get("data_parallel_size") or 1) != req.deploy.dp or not params.get(
            "enable_expert_parallel"
        ):
            continue
        if (c.get("engine_args") or {}).get("all2all_backend"):
            out.append(c)
    return out


def _entry(c: EvidenceCell, name: str) -> RuledOut:
    where = c.gpu_name or "this GPU"
    reason = (
        f"DP={c.get('params', {}).get('data_parallel_size')} + EP engine on {where}: {c.get('root_cause')}"
    )
    return {
        "role": "all2all",
        "backend": name,
        "fa_version": None,
        "outcome": str(c.get("outcome")),
        "reason": reason[:300],
        "source": "measured",
        "vllm": c.vllm,
        "link": c.source,
        "applies": True,
    }


def all2all_ruled_out(mine: list[EvidenceCell], req: Request) -> tuple[list[RuledOut], list[str]]:
    """(the all2all backends whose measured DP + EP engine failed, a note on the ones that ran) for a
    ``--dp N --ep`` question; nothing otherwise."""
    if req.deploy.dp <= 1 or not req.deploy.ep:
        return [], []
    by_name: dict[str, list[EvidenceCell]] = {}
    for c in _dp_cells(mine, req):
        by_name.setdefault(str(c.get("engine_args")["all2all_backend"]), []).append(c)
    failed = {n: next(c for c in cs if c.failed) for n, cs in by_name.items() if any(c.failed for c in cs)}
    worked = sorted(n for n, cs in by_name.items() if n not in failed and any(c.ok for c in cs))
    notes = []
    if worked:
        notes.append(f"all2all: {', '.join(worked)} ran at DP={req.deploy.dp} + EP (measured)")
    return [_entry(c, n) for n, c in sorted(failed.items())], notes
