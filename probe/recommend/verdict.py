"""One predicted verdict per (model, GPU, backend [, FA version], quant, TP), one named step per source.

A backend is predicted to work only when

1. vLLM's own check accepts it for this model (:func:`oracle_step`, cells of ``probe predict``,
   basis ``vllm_check``) — or, where the oracle has no cell (a vLLM without adapter, no predictions
   published), the hand rules of the backend catalog do (:func:`hand_rule_step`, basis
   ``hand_rule``, and the answer says so; a hand rule alone, with neither a scan nor a report
   of the backend working, predicts nothing);
2. its kernels for the quant's own variant are loadable on the GPU (:func:`scan_step`: the ELF
   scan's verdict for ``cutlass [fp8]`` when the model is fp8, basis ``elf_scan``); and
3. no field report of the same failure applies (:func:`report_step`, :mod:`.report_match`).

Each step returns a :class:`Step` (``ok`` None: the source says nothing); :func:`verdict` combines them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from probe.catalog.backends import BackendCatalog
from probe.matrix.scan_predictions import variant_for_quant
from probe.recommend import report_match
from probe.recommend.types import EvidenceCell, Request


@dataclass(frozen=True)
class Step:
    source: str  # vllm_check / hand_rule / elf_scan / field_report
    ok: bool | None  # None: nothing to say
    cells: list[EvidenceCell]
    reason: str


@dataclass(frozen=True)
class BackendVerdict:
    role: str  # "moe" | "attention"
    backend: str
    fa: int | None
    ok: bool
    steps: list[Step]

    @property
    def ok_cells(self) -> list[EvidenceCell]:
        return [c for s in self.steps if s.ok for c in s.cells]

    @property
    def bad_cells(self) -> list[EvidenceCell]:
        return [c for s in self.steps if s.ok is False for c in s.cells]

    @property
    def check(self) -> Step:
        """The step that judged vLLM's acceptance: the oracle's, else the hand rule's."""
        return self.steps[0]

    @property
    def text(self) -> str:
        return "; ".join(s.reason for s in self.steps if s.reason)


NOTHING = Step("", None, [], "")


def _cites(c: EvidenceCell) -> str:
    d = c.get("details") or {}
    where = f" ({d['file']}:{d['line']})" if d.get("file") and d.get("line") else ""
    return f"{c.get('root_cause') or c.get('outcome')}{where}"


def is_oracle(c: EvidenceCell) -> bool:
    return c.evidence == "predicted" and c.get("basis") == "vllm_check"


def is_scan(c: EvidenceCell) -> bool:
    return c.evidence == "predicted" and c.get("basis") != "vllm_check" and c.kind in ("moe", "attention")


def _tp_fits(c: EvidenceCell, req: Request) -> bool:
    return c.get("tp") in (None, req.least_tp)


def deploy_fits(c: EvidenceCell, req: Request, role: str) -> bool:
    """An oracle cell asked for the request's deployment: the KV-cache dtype (attention), expert and
    data parallelism (MoE). Cells without these parameters were asked with vLLM's defaults."""
    p = c.get("params") or {}
    if role == "attention":
        return str(p.get("kv_cache_dtype") or "auto") == req.deploy.kv_cache_dtype
    return bool(p.get("ep")) == req.deploy.ep and int(p.get("dp") or 1) == req.deploy.dp


def oracle_cells(mine: list[EvidenceCell], req: Request, role: str) -> list[EvidenceCell]:
    """The oracle's cells for this model, quant (MoE), TP and deployment on this GPU, ``auto`` included;
    when vLLM was not asked about this model (a config.json model, a quant its profile does not ship),
    those of the catalog model vLLM's check sees the same way (:func:`proxy_cells`)."""
    own = [
        c
        for c in mine
        if is_oracle(c)
        and c.kind == role
        and req.is_model(c.get("model"))
        and deploy_fits(c, req, role)
        and (role == "attention" or (c.get("quant") == req.quant and _tp_fits(c, req)))
    ]
    return own or proxy_cells(mine, req, role)


def _attention_key(c: EvidenceCell) -> tuple[Any, ...]:
    p = c.get("params") or {}
    return (
        c.get("head_dim"),
        bool(p.get("use_mla")),
        bool(p.get("has_sink")),
        bool(p.get("has_sliding_window")),
    )


def _request_attention_key(req: Request) -> tuple[Any, ...]:
    prof, hybrid = req.profile, req.profile.hybrid or {}
    head = prof.mla.kv_lora_rank + prof.mla.qk_rope_head_dim if prof.mla else prof.head_dim
    return (
        head,
        prof.mla is not None,
        bool(hybrid.get("attention_sinks")),
        hybrid.get("sliding_window") is not None,
    )


def _moe_distance(c: EvidenceCell, req: Request) -> float:
    e, h = c.get("experts"), c.get("hidden")
    if not e or not h or not req.experts:
        return float("inf")
    return abs(math.log2(int(e) / req.experts)) + abs(math.log2(int(h) / req.moe_hidden))


def proxy_cells(mine: list[EvidenceCell], req: Request, role: str) -> list[EvidenceCell]:
    """vLLM's verdicts for another catalog model that its check sees the same way: for attention, one
    whose layer has the same head size, MLA-ness, sinks and sliding window (the inputs of vLLM's
    attention selection); for MoE, the nearest-shaped model at the same quant and activation. Each cell
    carries ``proxy_of`` (that model), and the answer says so."""
    pool = [c for c in mine if is_oracle(c) and c.kind == role and deploy_fits(c, req, role)]
    if role == "attention":
        want = _request_attention_key(req)
        pool = [c for c in pool if _attention_key(c) == want]
    else:
        act = (req.profile.moe.activation if req.profile.moe else "").replace("relu2", "relu2_no_mul")
        pool = [
            c
            for c in pool
            if c.get("quant") == req.quant
            and str((c.get("params") or {}).get("activation", "silu")) == act
            and _tp_fits(c, req)
        ]
    if not pool:
        return []
    nearest = min(pool, key=lambda c: (_moe_distance(c, req) if role == "moe" else 0.0, str(c.get("model"))))
    model = nearest.get("model")
    return [replace(c, cell={**c.cell, "proxy_of": model}) for c in pool if c.get("model") == model]


def oracle_step(oracle: list[EvidenceCell], backend: str, fa: int | None) -> Step:
    """Step 1: vLLM's own check for this model (``skipped`` cells say nothing)."""
    cells = [c for c in oracle if c.get("backend") == backend and c.get("outcome") != "skipped"]
    if not cells:
        return NOTHING
    c = cells[0]
    vllm = f"vLLM {c.vllm}" if c.vllm else "vLLM"
    if c.get("proxy_of"):
        vllm += f" (asked for {c.get('proxy_of')}, which its check sees the same way)"
    if not c.ok:
        return Step("vllm_check", False, [c], f"{vllm} refuses it: {_cites(c)}")
    if fa is not None:
        return _fa_step(c, fa, vllm)
    return Step("vllm_check", True, [c], f"{vllm}'s own check accepts it for this model")


def _fa_step(c: EvidenceCell, fa: int, vllm: str) -> Step:
    """A forced FlashAttention version: vLLM picks one version by default (``fa_version``), which is
    no refusal of the others; it refuses a forced version only for a reason its own
    ``fa_version_unsupported_reason`` gives on this GPU (``details.fa_support``)."""
    stated = c.get("fa_version")
    default = f" (it picks FA{stated} by default)" if stated not in (None, fa) else ""
    forced = ((c.get("details") or {}).get("fa_forced") or {}).get(str(fa))
    if isinstance(forced, dict):  # vLLM's own validation with this version forced
        if not forced.get("ok"):
            return Step("vllm_check", False, [c], f"{vllm} refuses FA{fa} here: {forced.get('message')}")
        runs = forced.get("runs")
        if runs not in (None, fa):
            return Step("vllm_check", False, [c], f"{vllm} runs FA{runs} here when FA{fa} is forced")
        return Step("vllm_check", True, [c], f"{vllm}'s own check accepts FA{fa} for this model{default}")
    support = (c.get("details") or {}).get("fa_support")
    why = support.get(str(fa)) if isinstance(support, dict) else None
    if why and "unavailable due to" not in why:  # a property of the GPU, not of the predicting machine
        return Step("vllm_check", False, [c], f"{vllm} refuses FA{fa} here: {why}")
    if not isinstance(support, dict) and default:
        return Step(
            "vllm_check", True, [c], f"{vllm}'s own check accepts FLASH_ATTN{default}; FA{fa} not asked"
        )
    return Step("vllm_check", True, [c], f"{vllm}'s own check accepts FA{fa} for this model{default}")


def hand_rule_step(req: Request, role: str, backend: str, cat: BackendCatalog) -> Step:
    """Step 1 without an oracle cell: the hand rules (the backend catalog's vLLM facts: quants, minimum
    GPU, platform)."""
    if role == "attention":
        mla = "MLA" in backend.upper()
        ok = mla == req.mla
        return Step("hand_rule", ok, [], "hand rule: " + ("MLA" if mla else "non-MLA") + " backend")
    rec = cat.find("moe", backend)
    if rec is None:
        return NOTHING
    floor = rec.vllm.min_sm.get(req.quant)
    why = []
    if req.quant not in rec.vllm.quants:
        why.append(f"no {req.quant} kernels")
    if floor is not None and req.sm < floor:
        why.append(f"needs sm_{floor}+ for {req.quant}")
    if not rec.vllm.single_gpu_cuda:
        why.append("not a single-GPU CUDA backend")
    return Step("hand_rule", not why, [], "hand rule (backend catalog): " + ("; ".join(why) or "accepted"))


def scan_cell(
    mine: list[EvidenceCell], req: Request, role: str, backend: str, fa: int | None
) -> EvidenceCell | None:
    """The ELF scan's cell for this backend's variant that serves the request's quant (FA version)."""
    cells = [
        c
        for c in mine
        if is_scan(c) and c.kind == role and c.get("backend") == backend and c.get("fa_version") == fa
    ]
    variants = {str((c.get("details") or {}).get("variant") or "default"): c for c in cells}
    if role == "attention" or not variants:
        return cells[0] if cells else None
    name = variant_for_quant(set(variants), req.quant)
    return variants.get(name) if name else None


def scan_step(cell: EvidenceCell | None) -> Step:
    """Step 2: the quant variant's kernels loadable on the GPU (the ELF scan)."""
    if cell is None:
        return NOTHING
    d = cell.get("details") or {}
    label = f"{cell.get('backend')}" + (f" [{d['variant']}]" if d.get("variant") else "")
    if cell.failed or cell.get("outcome") == "skipped":
        return Step(
            "elf_scan", False, [cell], f"ELF scan: {label} {d.get('verdict')}: {cell.get('root_cause')}"
        )
    return Step("elf_scan", True, [cell], f"ELF scan: {label} {d.get('verdict')}")


def report_cells(
    mine: list[EvidenceCell], req: Request, role: str, backend: str, fa: int | None
) -> list[EvidenceCell]:
    """Field reports (with ``applies``) of this backend that concern the request."""
    return [
        c
        for c in mine
        if c.evidence == "reported"
        and c.get("applies")
        and c.kind == role
        and c.get("backend") == backend
        and c.get("fa_version") in (None, fa)
        and report_match.relevant(c, req)
    ]


def report_step(cells: list[EvidenceCell], req: Request) -> Step:
    """Step 3: a field report of a failure rules the backend out; one of a success supports it. A
    failure seen on a family sibling (``applies.kin_of``) yields to a report of a success on this GPU
    itself, and a failure seen here is named before a sibling's."""
    here_ok = any(c.ok and not c.get("applies", {}).get("kin_of") for c in cells)
    bad = sorted(
        (c for c in cells if c.failed and not (here_ok and c.get("applies", {}).get("kin_of"))),
        key=lambda c: bool(c.get("applies", {}).get("kin_of")),
    )
    if bad:
        c = bad[0]
        how = report_match.scope(c, req)
        return Step("field_report", False, bad, f"field report: {c.get('outcome')} ({c.get('root_cause')})"
                    + (f" — {how}" if how else ""))  # fmt: skip
    good = [c for c in cells if c.ok]
    if good:
        how = report_match.scope(good[0], req)
        return Step("field_report", True, good, "field report: works" + (f" ({how})" if how else ""))
    return NOTHING


def verdict(
    mine: list[EvidenceCell],
    oracle: list[EvidenceCell],
    req: Request,
    role: str,
    backend: str,
    fa: int | None,
    cat: BackendCatalog,
) -> BackendVerdict:
    """The combined predicted verdict for one backend (see the module docstring)."""
    check = oracle_step(oracle, backend, fa)
    if check.ok is None:
        check = hand_rule_step(req, role, backend, cat)
    scan = scan_step(scan_cell(mine, req, role, backend, fa))
    report = report_step(report_cells(mine, req, role, backend, fa), req)
    seen = (
        check.source == "vllm_check" or scan.ok is True or report.ok is True
    )  # a hand rule alone is not enough
    ok = check.ok is True and scan.ok is not False and report.ok is not False and seen
    return BackendVerdict(role, backend, fa, ok, [check, scan, report])


def candidates(
    mine: list[EvidenceCell], oracle: list[EvidenceCell], req: Request, role: str, cat: BackendCatalog
) -> list[tuple[str, int | None]]:
    """(backend, FA version) pairs to judge: those the oracle named for this model, else the hand
    rules' and the scan's backends. FLASH_ATTN once per FA version the scan knows (the oracle's own
    FA version only, when it states one)."""
    names = {str(c.get("backend")) for c in oracle if c.get("backend") != "auto"}
    if not names:
        if role == "moe":
            names = set(cat.names("moe"))
        else:
            names = {str(c.get("backend")) for c in mine if is_scan(c) and c.kind == "attention"}
            names |= {b.name for b in cat.records("attention") if b.vllm.since}
            names = {n for n in names if ("MLA" in n.upper()) == req.mla}
    out: list[tuple[str, int | None]] = []
    for name in sorted(names):
        fas = sorted(
            {
                c.get("fa_version")
                for c in mine
                if is_scan(c) and c.get("backend") == name and c.get("fa_version")
            }
        )
        stated = next((c.get("fa_version") for c in oracle if c.get("backend") == name and c.ok), None)
        if name == "FLASH_ATTN" and fas:
            out += [(name, f) for f in fas if stated is None or f == stated]
        else:
            out.append((name, stated if name == "FLASH_ATTN" else None))
    return out


def auto_pick(oracle: list[EvidenceCell]) -> str | None:
    """The backend vLLM's ``auto`` selects here (MoE: the one with the same experts class)."""
    auto = next((c for c in oracle if c.get("backend") == "auto" and c.ok), None)
    if auto is None:
        return None
    d = auto.get("details") or {}
    if auto.kind == "attention":
        return d.get("selected")
    cls = d.get("experts_class")
    same = [
        c
        for c in oracle
        if c.get("backend") != "auto" and (c.get("details") or {}).get("experts_class") == cls
    ]
    return str(same[0].get("backend")) if same and cls else None
