#!/usr/bin/env python3
"""Publish the static (scan-only) predictions of a set of wheels across the whole GPU catalog.

    python3 scripts/publish_static_predictions.py     # vLLM 0.33.0 + torch 2.14.1 + flashinfer 0.7.2.post1
                                                      #   + flashinfer-cubin 0.6.13 -> matrices/static/
    python3 scripts/publish_static_predictions.py --name NAME --out DIR \\
        vllm-*.whl torch-*.whl flashinfer_python-*.whl flashinfer_cubin-*.whl   # another set, on disk

Writes ``DIR/<name>.json`` (self-describing: provenance with wheel names + sha256, the GPU targets,
per-file loadability of the files the backends and torch need, and the backend x target table with
reasons and kernel evidence) and ``DIR/<name>.md`` (the same as tables). Wheels are read straight from
the .whl (no unpacking). Without wheel arguments the published set is downloaded once with
``pip download --no-deps`` into ``--cache`` (default ``~/.cache/probe-tests/wheels``, shared with the
tests). A wheel's package is read from its file name (vllm, torch, flashinfer_python, flashinfer_cubin).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probe.arch.backend_view import BackendRow
    from probe.arch.records import FileRecord
    from probe.catalog.gpus import Gpu

PACKAGES = ("vllm", "torch", "flashinfer-python", "flashinfer-cubin")
TORCH_FILES = ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_linalg.so")
CACHE = Path(os.environ.get("PROBE_TESTS_CACHE", Path.home() / ".cache" / "probe-tests")) / "wheels"
LINUX_X86 = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"]
# the published set: package -> (requirement, pip download options, wheel file-name prefix)
DEFAULT_SET: dict[str, tuple[str, list[str], str]] = {
    "vllm": ("vllm==0.33.0", LINUX_X86, "vllm-0.33.0-"),
    "torch": ("torch==2.14.1", LINUX_X86, "torch-2.14.1-"),
    "flashinfer-python": ("flashinfer-python==0.7.2.post1", [], "flashinfer_python-0.7.2.post1-"),
    "flashinfer-cubin": ("flashinfer-cubin==0.6.13", [], "flashinfer_cubin-0.6.13-"),
}
DEFAULT_NAME = "vllm-0.33.0_torch-2.14.1-cu130_flashinfer-0.7.2.post1_flashinfer-cubin-0.6.13"
DEFAULT_NOTES = [
    "flashinfer-python 0.7.2.post1 ignores flashinfer-cubin 0.6.13 (version mismatch) unless "
    "FLASHINFER_DISABLE_VERSION_CHECK=1, and expects other artifact paths: at run time the "
    "TRT-LLM-gen cubins are downloaded instead; the arch coverage of the 0.7.x artifacts is the same "
    "(sm100f/sm103a, plus sm107a).",
    "jit: FlashInfer modules (fused_moe_*, attention) are compiled at first use by nvcc; no "
    "flashinfer-jit-cache was part of this set.",
]
WHAT = (
    "Static predictions: which backend's kernels exist as code each GPU can load, read from the wheels' "
    "fatbins/cubins without a GPU. A runtime matrix (probe run) decides what really works."
)


def package_of(whl: Path) -> str:
    """``flashinfer_cubin-0.6.13-py3-none-any.whl`` -> ``flashinfer-cubin``."""
    return whl.name.split("-", 1)[0].lower().replace("_", "-")


def download(package: str, cache: Path) -> Path:
    """The published set's wheel of ``package``, downloaded with pip on first use."""
    req, opts, prefix = DEFAULT_SET[package]
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{prefix}*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(cache)]
        out = subprocess.run([*cmd, *opts, req], capture_output=True, text=True, check=False)
        found = sorted(cache.glob(f"{prefix}*.whl"))
        if out.returncode != 0 or not found:
            raise SystemExit(f"pip download {req} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _member(path: str) -> str:
    return path.split("!", 1)[1] if "!" in path else path


def _cubin_group(member: str) -> str:
    """flashinfer_cubin/cubins/<hash>/batched_gemm-x-y/Bmm_....cubin -> 'batched_gemm-x-y' etc."""
    parts = member.split("/")
    try:
        i = parts.index("cubins")
    except ValueError:
        return "/".join(parts[:-1])
    rest = parts[i + 2 : -1]
    return "/".join(rest[:2]) if rest and rest[0] == "fmha" else (rest[0] if rest else "")


def _file_rows(recs: list[FileRecord], gpus: Sequence[Gpu]) -> list[dict[str, Any]]:
    """Per-file loadability: every file with device code except the cubin tree (summarised apart)."""
    from probe.arch.verdicts import file_codes, verdict_for

    files = []
    for r in recs:
        member = _member(r.path)
        if not r.entries or member.endswith(".cubin"):
            continue
        codes = file_codes(r)
        files.append(
            {
                "path": member,
                "wheel": Path(r.path.split("!", 1)[0]).name,
                "package": r.package,
                "containers": r.containers,
                "entries": [
                    {"kind": k, "arch": a, "compression": c, "count": n}
                    for (k, a, c), n in sorted(
                        Counter((e.kind, e.arch, e.compression) for e in r.entries if e.loadable).items(),
                        key=lambda x: (x[0][0], x[0][1] or ""),
                    )
                ],
                "kernels": len(r.kernels) if r.kernels is not None else None,
                "codes": [c.label for c in codes],
                "verdicts": {g.label: verdict_for(codes, g).verdict.value for g in gpus},
            }
        )
    return files


def _cubin_groups(records: list[FileRecord]) -> dict[str, Counter[str]]:
    """Cubins of the flashinfer-cubin tree per group folder and arch."""
    cubin_groups: dict[str, Counter[str]] = {}
    for r in records:
        member = _member(r.path)
        if member.endswith(".cubin"):
            for e in r.entries:
                cubin_groups.setdefault(_cubin_group(member), Counter())[e.arch or "?"] += 1

    return cubin_groups


def _markdown(
    doc: dict[str, Any], table: Any, cells: list[BackendRow], files: list[dict[str, Any]], gpus: Sequence[Gpu]
) -> list[str]:
    from probe import __version__
    from probe.arch.backend_view import LEGEND, render_markdown

    provenance = doc["provenance"]
    command = doc["generated_by"]["command"]
    md = [
        f"# Static predictions: {doc['name']}",
        "",
        f"Generated by `{command}` (probe {__version__}) from these wheels, read straight from the .whl:",
        "",
        "| package | wheel | sha256 |",
        "|---|---|---|",
    ]
    md += [f"| {p['package']} | `{p['wheel']}` | `{p['sha256']}` |" for p in provenance]
    md += [
        "",
        "## Backend x GPU",
        "",
        render_markdown(table),
        "",
        "Legend: " + "; ".join(f"`{k}` {v}" for k, v in LEGEND.items()),
        "",
        "## Why (one line per cell that is not `pure`)",
        "",
    ]
    for c in cells:
        if c.verdict == "pure":
            continue
        label = c.name + (f" [{c.variant}]" if c.variant != "default" else "")
        md.append(f"- **{label}** ({c.backend}) @ {c.target}: `{c.verdict}` — {c.reason}")
    md += [
        "",
        "## Files (loadability of the whole file)",
        "",
        "| file | " + " | ".join(g.label for g in gpus) + " |",
        "|---|" + "---|" * len(gpus),
    ]
    for f in files:
        md.append(f"| `{f['path']}` | " + " | ".join(f["verdicts"][g.label] for g in gpus) + " |")
    md += ["", "## flashinfer-cubin tree (cubins per arch)", ""]
    md += [f"- `{g}`: " + ", ".join(f"{a} x{n}" for a, n in c.items()) for g, c in doc["cubin_tree"].items()]
    return md


def scan(whls: dict[str, Path]) -> tuple[list[FileRecord], list[FileRecord]]:
    """Records of the vLLM / FlashInfer wheels (kernels included) and of torch's CUDA libraries."""
    from probe.arch.scanner import scan_paths

    records = []
    for name in ("vllm", "flashinfer-python", "flashinfer-cubin"):
        records += scan_paths([str(whls[name])], kernels=True, use_cache=False)
    torch_all = scan_paths([str(whls["torch"])], kernels=False, use_cache=False)
    return records, [r for r in torch_all if _member(r.path) in TORCH_FILES]


def document(
    name: str, command: str, whls: dict[str, Path], notes: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The static-predictions document of these wheels and its Markdown lines."""
    from probe import __version__
    from probe.arch.backend_view import LEGEND, VERDICTS, backend_table_from_cells, backend_view
    from probe.catalog.backends import catalog as backend_catalog
    from probe.catalog.gpus import catalog

    gpus = catalog().gpus
    records, torch_recs = scan(whls)
    cells = backend_view(records, gpus)
    table = backend_table_from_cells(cells)
    files = _file_rows([*torch_recs, *records], gpus)
    doc = {
        "kind": "probe.static-predictions",
        "schema_version": 1,
        "name": name,
        "generated_by": {"command": command, "probe_version": __version__},
        "what": WHAT,
        "provenance": [
            {"package": n, "wheel": p.name, "sha256": sha256(p), "size": p.stat().st_size}
            for n, p in whls.items()
        ],
        "backend_catalog_reference": backend_catalog().reference,
        "targets": [
            {"target": g.label, "cc": g.cc, "names": g.names, "integrated": g.integrated} for g in gpus
        ],
        "verdicts": list(VERDICTS),
        "legend": LEGEND,
        "backend_table": table,
        "backend_cells": [c.to_dict() for c in cells],
        "files": files,
        "cubin_tree": {g: dict(sorted(c.items())) for g, c in sorted(_cubin_groups(records).items())},
        "scan_errors": [{"path": r.path, "error": r.error} for r in records + torch_recs if r.error],
        "notes": notes,
    }
    return doc, _markdown(doc, table, cells, files, gpus)


def wheels_of(paths: list[Path], cache: Path) -> dict[str, Path]:
    """package -> wheel: the ones given (each of the four packages once), else the published set."""
    if not paths:
        return {name: download(name, cache) for name in PACKAGES}
    whls = {package_of(p): p for p in paths}
    if sorted(whls) != sorted(PACKAGES) or len(paths) != len(PACKAGES):
        raise SystemExit(
            f"give one wheel of each of {', '.join(PACKAGES)}; got {', '.join(p.name for p in paths)}"
        )
    return {name: whls[name] for name in PACKAGES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="publish_static_predictions.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "wheels", nargs="*", type=Path, metavar="WHEEL", help="the four wheels (default: download)"
    )
    ap.add_argument("--out", type=Path, default=Path("matrices/static"), help="folder (default: %(default)s)")
    ap.add_argument("--name", help="file stem (default: the published set's name; required with WHEEL)")
    ap.add_argument("--cache", type=Path, default=CACHE, help="download folder (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.wheels and not args.name:
        ap.error("--name is required with WHEEL arguments")
    whls = wheels_of(args.wheels, args.cache)
    command = shlex.join(
        ["python3", "scripts/publish_static_predictions.py", *(argv if argv is not None else sys.argv[1:])]
    )
    doc, md = document(args.name or DEFAULT_NAME, command, whls, [] if args.wheels else DEFAULT_NOTES)
    args.out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = args.out / f"{doc['name']}.json", args.out / f"{doc['name']}.md"
    jpath.write_text(json.dumps(doc, indent=1) + "\n")
    mpath.write_text("\n".join(md) + "\n")
    print(jpath)
    print(mpath)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
