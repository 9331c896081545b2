"""The second round's hostile inputs, each once as a whole process under the 4 GiB address cap: exit
code, wall time, peak RSS — for this checkout or another (``--root``: the code before the fixes, e.g.
``git archive HEAD | tar -x -C /tmp/base``).

Usage:  python3 benchmarks/bench_hostile_round2.py [--out DIR] [--root CHECKOUT] [--timeout S] [--only TEXT]
Prints one row per input (``timeout``: killed at ``--timeout``); the inputs are generated under
``--out`` (default: a temporary folder) with the generators of ``tests/hostile/inputs2.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.arch.image_build import write_oci_layout  # noqa: E402
from tests.hostile import inputs as h  # noqa: E402
from tests.hostile import inputs2 as h2  # noqa: E402
from tests.hostile.harness import run_probe  # noqa: E402


def _scan_rows(d: Path) -> dict[str, list[str]]:
    whl = h2.lying_wheel(d / "lie-1.0-py3-none-any.whl", "lie/k.cubin", zipfile.ZIP_BZIP2, 5 << 29, 1 << 20)
    hidden = h2.zip_with_hidden_members(d / "x-1.0-py3-none-any.whl", 600_000)
    many = h.oci_with_layer_blob(d / "oci-many", h2.gzip_layer(d / "many.tar.gz", h2.many_members(1_200_000)))
    pax = h.oci_with_layer_blob(d / "oci-pax", h2.gzip_layer(d / "pax.tar.gz", h2.piled_pax(3000, 900_000)))
    cubin = (h.PREBUILT / "sm_90a.cubin").read_bytes()
    big = h.oci_with_layer_blob(
        d / "oci-big", h.gzip_bomb_layer(d / "big.tar.gz", "usr/lib/big.cubin", 200 << 20, cubin)
    )
    deep = "a/" * 300_000
    deep_blob = h2.gzip_layer(
        d / "deep.tar.gz",
        [
            h2.pax_block({"path": deep + "x.so"}),
            h2.tar_header("p", 0),
            h2.pax_block({"linkpath": deep}),
            h2.tar_header("usr/lib/link.so", 0, "2"),
        ],
    )
    lay = h.layer(d, "l", [("usr/lib/a.cubin", h.PREBUILT / "sm_90a.cubin"), ("pad", os.urandom(40 << 20))])
    repeated = write_oci_layout(d / "oci-repeated", {"linux/amd64": [lay] * 500})
    (d / "names").mkdir()
    (d / "names" / "n.so").write_bytes(h2.elf_with_endless_names(200_000, 8 << 20))
    (d / "names" / "k.cubin").write_bytes(h2.cubin_with_endless_symbols(100_000, 4 << 20))
    (d / "fat").mkdir()
    (d / "fat" / "o.so").write_bytes(h2.elf_with_overlapping_fatbins(2000, 2000))
    (d / "fat" / "m.fatbin").write_bytes(
        h2.fatbin_container(h2.header_only_entry() for _ in range(1_000_000))
    )
    (d / "k.ptx").write_bytes(h2.ptx_with_entries(3_000_000))
    s = ["scan", "--no-cache", "--json"]
    return {
        "scan: bzip2 member declaring 1 MiB, inflating to 2.5 GiB": [*s, str(whl)],
        "scan: end record says 2 members, central directory 600,000": [*s, str(hidden)],
        "scan: gzip layer of 1.2 million members": [*s, str(many)],
        "scan: 3,000 pax headers of 900 KB before one member": [*s, str(pax)],
        "scan --kernels: 200 MiB cubin in a gzip layer": [*s, "--kernels", str(big)],
        "scan: pax path and link target of 300,000 components": [
            *s,
            str(h.oci_with_layer_blob(d / "oci-deep", deep_blob)),
        ],
        "scan: one 40 MB layer listed 500 times": [*s, str(repeated)],
        "scan --kernels: 200k section / 100k symbol names without NUL": [*s, "--kernels", str(d / "names")],
        "scan: 2,000 overlapping .nv_fatbin + a 1M-entry fatbin": [*s, str(d / "fat")],
        "scan --kernels: PTX of 3 million entries": [*s, "--kernels", str(d / "k.ptx")],
    }


def _file_rows(d: Path) -> dict[str, list[str]]:
    fifo = d / "in.fifo"
    os.mkfifo(fifo)
    (d / "deep.json").write_text(h.deep_json(100_000))
    huge = h2.matrix_with_huge_string(d / "huge.json", 300)
    cells = h2.matrix_of_cells(d / "cells.json", 1_000_000)
    gz = d / "bomb.json.gz"
    gz.write_bytes(h.deflated_zeros(b"{", 1 << 30, 31)[0])
    indent = h2.matrix_changing_indent(d / "indent.json", 20_000)
    nan = d / "nan.json"
    nan.write_text(h.MATRIX.read_text().replace('"tokens_per_s": 24.0', '"tokens_per_s": NaN'))
    cfg = d / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 10**9,
                "hidden_size": 4096,
                "num_attention_heads": 32,
            }
        )
    )
    unit = "NCCL error: cuMemAlloc failed cicc nvcc ptxas triton CalledProcessError: Command gcc "
    (d / "line.log").write_text((unit * 200)[:16000] + "\n")
    (d / "log163k.log").write_text("".join((unit * 200)[:16300] + "\n" for _ in range(10)))
    dry = ["run", "--models", "122b", "--budget", "15m", "--dry-run"]
    return {
        "run --dry-run --estimates FIFO": [*dry, "--estimates", str(fifo)],
        "run --dry-run --plan-file /dev/zero": [*dry, "--plan-file", "/dev/zero"],
        "run --dry-run --reuse JSON 100,000 deep": [*dry, "--reuse", str(d / "deep.json")],
        "report add FIFO": [
            "report",
            "add",
            str(fifo),
            "--gpu",
            "sm_90",
            "--backend",
            "marlin",
            "--citation",
            "x",
            "-o",
            str(d / "r.json"),
        ],
        "show: a 300 MB string in a cell": ["show", str(huge)],
        "show: a million cells": ["show", str(cells)],
        "show: .json.gz inflating to 1 GiB": ["show", str(gz)],
        "show: one-line cells after a probe-laid cell (20,000 cells)": ["show", str(indent)],
        "gate: current engine speed NaN": ["gate", "--baseline", str(h.MATRIX), "--current", str(nan)],
        "models: config of 10^9 layers": ["models", str(cfg), "--layers"],
        "classify: a 16 KB line of near matches": ["classify", str(d / "line.log")],
        "classify: a 163 KB log of ten such lines": ["classify", str(d / "log163k.log")],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--only", help="run the rows whose name holds this text")
    a = ap.parse_args()
    d = a.out or Path(tempfile.mkdtemp(prefix="probe-hostile2-"))
    d.mkdir(parents=True, exist_ok=True)
    rows = {**_scan_rows(d), **_file_rows(d)}
    print(f"{'input':<62} {'exit':>7} {'wall s':>7} {'peak MB':>8}")
    for name, args in rows.items():
        if a.only and a.only not in name:
            continue
        r = run_probe(*args, timeout=a.timeout, root=a.root)
        rc = "timeout" if r.timed_out else str(r.rc)
        note = " (internal error)" if "internal error" in r.err or "Traceback" in r.err else ""
        print(f"{name:<62} {rc:>7} {r.wall_s:>7.1f} {r.peak_rss_mb:>8.0f}{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
