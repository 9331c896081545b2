#!/usr/bin/env python3
"""How many (model, backend) verdicts the hand rules alone would give differently, per GPU.

    python3 scripts/hand_rules_vs_verdicts.py [--matrices matrices] [--examples 5]   # from the repo root

Hand rules (what ``probe recommend`` falls back to where vLLM's own check has no answer):
``vllm_flags.json`` (quants, minimum GPU, platform) and the ELF scan's verdict of the backend's primary
variant (with the ``backends.json`` gates), MLA-ness for attention. Combined verdict
(:mod:`probe.recommend.verdict`): vLLM's own check for the model (the published oracle) else the hand
rule, AND the scan of the quant's own variant, AND no applicable field report of a failure. Backends
compared: the hand rules' single-GPU CUDA MoE backends and the scan's attention backends (FLASH_ATTN
once per FA version), for every profile in its default quant. Prints per GPU the verdicts compared, how
many differ (ok -> no, no -> ok) and a few random examples with the combined verdict's reason.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from probe.catalog.backends import catalog as backend_catalog
from probe.catalog.gpus import catalog
from probe.catalog.models import load_profiles
from probe.recommend import verdict as v
from probe.recommend.sources import load_evidence
from probe.recommend.types import EvidenceCell, Request


def hand_rule(cells: list[EvidenceCell], req: Request, role: str, backend: str, fa: int | None) -> bool:
    """The hand rules' verdict: hand rule AND the scan's primary variant."""
    if role == "moe":
        ok = v.hand_rule_step(req, role, backend, backend_catalog()).ok is True
    else:
        ok = ("MLA" in backend.upper()) == req.mla
    scan = [
        c
        for c in cells
        if v.is_scan(c)
        and c.get("backend") == backend
        and c.get("fa_version") == fa
        and (c.get("details") or {}).get("primary", True)
    ]
    return ok and all(not c.failed for c in scan) and bool(scan)


def backends(cells: list[EvidenceCell], req: Request) -> list[tuple[str, str, int | None]]:
    out: list[tuple[str, str, int | None]] = []
    if req.experts:
        moe = backend_catalog().records("moe")
        out += [("moe", b.name, None) for b in sorted(moe, key=lambda b: b.name) if b.vllm.single_gpu_cuda]
    att = {
        (str(c.get("backend")), c.get("fa_version")) for c in cells if v.is_scan(c) and c.kind == "attention"
    }
    out += [("attention", b, fa) for b, fa in sorted(att, key=str) if ("MLA" in b.upper()) == req.mla]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrices", default="matrices", help="published matrices (default: %(default)s)")
    ap.add_argument("--examples", type=int, default=5, help="random examples of changed verdicts to print")
    args = ap.parse_args()
    examples: list[str] = []
    total = 0
    print(f"{'GPU':<8} {'verdicts':>8} {'changed':>8} {'ok->no':>7} {'no->ok':>7}")
    for gpu in catalog().gpus:
        cells = [c for c in load_evidence([Path(args.matrices)], gpu.sm).cells if c.get("gpu_sm") == gpu.sm]
        n = down = up = 0
        for prof in load_profiles():
            req = Request.of(prof, prof.quant, None, gpu.sm)
            mine = [c for c in cells if c.get("basis") != "vllm_check" or req.is_model(c.get("model"))]
            for role, b, fa in backends(mine, req):
                oracle = v.oracle_cells(mine, req, role)
                before = hand_rule(mine, req, role, b, fa)
                after = v.verdict(mine, oracle, req, role, b, fa, backend_catalog())
                n += 1
                if before == after.ok:
                    continue
                down, up = down + before, up + (not before)
                why = next((s.reason for s in after.steps if s.ok is False), after.text)
                label = f"{b}" + (f" FA{fa}" if fa else "")
                examples.append(
                    f"sm_{gpu.sm} {prof.name} ({prof.quant}) {label}: "
                    f"{'ok' if before else 'no'} -> {'ok' if after.ok else 'no'} — {why[:220]}"
                )
        total += down + up
        print(f"sm_{gpu.sm:<5} {n:>8} {down + up:>8} {down:>7} {up:>7}")
    print(f"total changed: {total}")
    print("\nexamples:")
    for e in random.Random(10).sample(examples, min(args.examples, len(examples))):
        print(f"  - {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
