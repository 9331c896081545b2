"""Publish the static (scan-only) predictions for a set of wheels across the whole GPU catalog.

    python benchmarks/static_predictions.py            # vLLM 0.33.0 + torch 2.14.1 + flashinfer 0.7.2.post1
                                                       #   + flashinfer-cubin 0.6.13 -> matrices/static/

Writes matrices/static/<name>.json (self-describing: provenance with wheel names + sha256, the GPU
targets, per-file loadability of the files the backends and torch need, and the backend x target
table with reasons and kernel evidence) and <name>.md (the same as tables). Wheels are read
straight from the .whl (no unpacking), downloaded once into ~/.cache/probe-tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.arch_backends import wheels  # noqa: E402

NAME = "vllm-0.33.0_torch-2.14.1-cu130_flashinfer-0.7.2.post1_flashinfer-cubin-0.6.13"
COMMAND = "python benchmarks/static_predictions.py"
PACKAGES = ("vllm", "torch", "flashinfer-python", "flashinfer-cubin")
TORCH_FILES = ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_linalg.so")


def _member(path: str) -> str:
    return path.split("!", 1)[1] if "!" in path else path


def _cubin_group(member: str) -> str:
    """flashinfer_cubin/cubins/<hash>/batched_gemm-x-y/Bmm_....cubin -> 'batched_gemm-x-y' etc."""
    parts = member.split("/")
    try:
        i = parts.index("cubins")
    except ValueError:
        return "/".join(parts[:-1])
    rest = parts[i + 2:-1]
    return "/".join(rest[:2]) if rest and rest[0] == "fmha" else (rest[0] if rest else "")


def build(out_dir: Path) -> tuple[Path, Path]:
    from probe import __version__
    from probe.arch.backends import LEGEND, VERDICTS, backend_table_from_cells, backend_view, render_markdown
    from probe.arch.scan import scan_paths
    from probe.arch.verdicts import file_codes, verdict_for
    from probe.catalog.backends import backend_catalog
    from probe.catalog.gpus import catalog

    gpus = catalog().gpus
    whls = {name: wheels.wheel(name) for name in PACKAGES}
    provenance = [{"package": n, "wheel": p.name, "sha256": wheels.sha256(p), "size": p.stat().st_size}
                  for n, p in whls.items()]

    records = []
    records += scan_paths([str(whls["vllm"])], kernels=True, use_cache=False)
    records += scan_paths([str(whls["flashinfer-python"])], kernels=True, use_cache=False)
    records += scan_paths([str(whls["flashinfer-cubin"])], kernels=True, use_cache=False)
    torch_recs = [r for r in scan_paths([str(whls["torch"])], kernels=False, use_cache=False)
                  if _member(r.path) in TORCH_FILES]
    errors = [{"path": r.path, "error": r.error} for r in records + torch_recs if r.error]

    cells = backend_view(records, gpus)
    table = backend_table_from_cells(cells)

    # per-file loadability: every file with device code except the cubin tree, which is summarised
    files = []
    for r in [*torch_recs, *records]:
        member = _member(r.path)
        if not r.entries or member.endswith(".cubin"):
            continue
        codes = file_codes(r)
        files.append({
            "path": member, "wheel": Path(r.path.split("!", 1)[0]).name, "package": r.package,
            "containers": r.containers,
            "entries": [{"kind": k, "arch": a, "compression": c, "count": n}
                        for (k, a, c), n in sorted(Counter((e.kind, e.arch, e.compression)
                                                           for e in r.entries if e.loadable).items(),
                                                   key=lambda x: (x[0][0], x[0][1] or ""))],
            "kernels": len(r.kernels) if r.kernels is not None else None,
            "codes": [c.label for c in codes],
            "verdicts": {g.label: verdict_for(codes, g).verdict.value for g in gpus},
        })
    cubin_groups: dict[str, Counter[str]] = {}
    for r in records:
        member = _member(r.path)
        if member.endswith(".cubin"):
            for e in r.entries:
                cubin_groups.setdefault(_cubin_group(member), Counter())[e.arch or "?"] += 1

    doc = {
        "kind": "probe.static-predictions",
        "schema_version": 1,
        "name": NAME,
        "generated_by": {"command": COMMAND, "probe_version": __version__},
        "what": "Static predictions: which backend's kernels exist as code each GPU can load, read from "
                "the wheels' fatbins/cubins without a GPU. A runtime matrix (probe run) decides what "
                "really works.",
        "provenance": provenance,
        "backend_catalog_reference": backend_catalog().reference,
        "targets": [{"target": g.label, "cc": g.cc, "names": g.names, "integrated": g.integrated}
                    for g in gpus],
        "verdicts": list(VERDICTS),
        "legend": LEGEND,
        "backend_table": table,
        "backend_cells": [c.to_dict() for c in cells],
        "files": files,
        "cubin_tree": {g: dict(sorted(c.items())) for g, c in sorted(cubin_groups.items())},
        "scan_errors": errors,
        "notes": [
            "flashinfer-python 0.7.2.post1 ignores flashinfer-cubin 0.6.13 (version mismatch) unless "
            "FLASHINFER_DISABLE_VERSION_CHECK=1, and expects other artifact paths: at run time the "
            "TRT-LLM-gen cubins are downloaded instead; the arch coverage of the 0.7.x artifacts is the same "
            "(sm100f/sm103a, plus sm107a).",
            "jit: FlashInfer modules (fused_moe_*, attention) are compiled at first use by nvcc; no "
            "flashinfer-jit-cache was part of this set.",
        ],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath = out_dir / f"{NAME}.json"
    jpath.write_text(json.dumps(doc, indent=1) + "\n")

    md = [f"# Static predictions: {NAME}", "",
          f"Generated by `{COMMAND}` (probe {__version__}) from these wheels, read straight from "
          "the .whl:", "",
          "| package | wheel | sha256 |", "|---|---|---|"]
    md += [f"| {p['package']} | `{p['wheel']}` | `{p['sha256']}` |" for p in provenance]
    md += ["", "## Backend x GPU", "", render_markdown(table), "",
           "Legend: " + "; ".join(f"`{k}` {v}" for k, v in LEGEND.items()), "",
           "## Why (one line per cell that is not `pure`)", ""]
    for c in cells:
        if c.verdict == "pure":
            continue
        label = c.name + (f" [{c.variant}]" if c.variant != "default" else "")
        md.append(f"- **{label}** ({c.backend}) @ {c.target}: `{c.verdict}` — {c.reason}")
    md += ["", "## Files (loadability of the whole file)", "",
           "| file | " + " | ".join(g.label for g in gpus) + " |",
           "|---|" + "---|" * len(gpus)]
    for f in files:
        md.append(f"| `{f['path']}` | " + " | ".join(f["verdicts"][g.label] for g in gpus) + " |")
    md += ["", "## flashinfer-cubin tree (cubins per arch)", ""]
    md += [f"- `{g}`: " + ", ".join(f"{a} x{n}" for a, n in c.items()) for g, c in doc["cubin_tree"].items()]
    mpath = out_dir / f"{NAME}.md"
    mpath.write_text("\n".join(md) + "\n")
    return jpath, mpath


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "matrices" / "static"))
    args = ap.parse_args()
    for p in build(Path(args.out)):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
