"""Each hostile input of ``tests/hostile/`` once, as a whole process: exit code, peak RSS, wall time.

Usage:  python3 benchmarks/bench_hostile.py [--out DIR] [--big MATRIX_DIR]
``--big``: a folder holding the ``old.json`` / ``new.json`` of ``benchmarks/bench_matrix.py build``
(the 200 MB rows are left out without it). Prints one row per input; the inputs are generated
under ``--out`` (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.arch.image_build import write_oci_layout  # noqa: E402
from tests.hostile import inputs as h  # noqa: E402
from tests.hostile.harness import run_probe  # noqa: E402


def _scan_rows(d: Path) -> dict[str, list[str]]:
    bomb = h.gzip_bomb_layer(
        d / "bomb.tar.gz", "usr/lib/big.cubin", int(1.9 * (1 << 30)), h.elf_head(h.EM_CUDA)
    )
    oci_bomb = h.oci_with_layer_blob(d / "oci-bomb", bomb)
    whl = h.wheel_with_member(
        d / "bomb-1.0-cp312-cp312-linux_x86_64.whl", "bomb/big.cubin", (1 << 30) - 1, h.elf_head(h.EM_CUDA)
    )
    os.mkfifo(d / "fifo.so")
    lay = h.layer(d, "l", [("usr/lib/a.cubin", h.PREBUILT / "sm_90a.cubin")])
    fifo_oci = write_oci_layout(d / "oci-fifo", {"linux/amd64": [lay]})
    blob = fifo_oci / "blobs" / "sha256" / lay.digest.split(":")[1]
    blob.unlink()
    os.mkfifo(blob)
    fan = h.fanout_index_layout(d / "fan", fanout=60, depth=8)
    deep = write_oci_layout(d / "oci-deep", {"linux/amd64": [lay]})
    (deep / "index.json").write_text('{"schemaVersion": 2, "manifests": ' + h.deep_json(5000) + "}")
    lower = h.layer(d, "lo", [("old.cubin", h.PREBUILT / "sm_90a.cubin")])
    upper = h.layer(d, "up", [(".wh..wh..opq", b""), ("new.cubin", h.PREBUILT / "sm_120.cubin")])
    opq = write_oci_layout(d / "oci-opq", {"linux/amd64": [lower, upper]})
    return {
        "scan: OCI layer gzip bomb, 1.9 GiB .cubin": ["scan", "--no-cache", str(oci_bomb)],
        "scan: wheel with a 1 GiB zip-bomb member": ["scan", "--no-cache", str(whl)],
        "scan /proc": ["scan", "--no-cache", "/proc"],
        "scan: a FIFO named as a file": ["scan", "--no-cache", str(d / "fifo.so")],
        "scan: a FIFO as an OCI blob": ["scan", "--no-cache", str(fifo_oci)],
        "scan: OCI index fan-out 60^8": ["scan", "--no-cache", str(fan)],
        "scan: index.json 5,000 levels deep": ["scan", "--no-cache", str(deep)],
        "scan: opaque whiteout at the image root": ["scan", "--no-cache", str(opq)],
    }


def _matrix_rows(d: Path, big: Path | None) -> dict[str, list[str]]:
    doc = json.loads(h.MATRIX.read_text())
    doc["cells"][0]["details"]["x"] = "DEEP"
    deep = d / "deep.json"
    deep.write_text(json.dumps(doc, indent=1).replace('"DEEP"', "[" * 5000 + "]" * 5000))
    doc = json.loads(h.MATRIX.read_text())
    doc["cells"] = []
    empty = d / "empty.json"
    empty.write_text(json.dumps(doc, indent=1))
    m = str(h.MATRIX)
    rows = {
        "show: matrix nested 5,000 deep": ["show", str(deep)],
        "gate: matrix nested 5,000 deep": ["gate", "--baseline", m, "--current", str(deep)],
        "gate: a matrix with no cells": ["gate", "--baseline", m, "--current", str(empty)],
        "gate --junit into a missing folder": [
            "gate",
            "--baseline",
            m,
            "--current",
            m,
            "--junit",
            str(d / "no" / "x.xml"),
        ],
        "gate --summary naming a folder": ["gate", "--baseline", m, "--current", m, "--summary", str(d)],
        "show -o naming a folder": ["show", m, "-o", str(d)],
    }
    if big is not None:
        old, new = str(big / "old.json"), str(big / "new.json")
        rows |= {
            "show: 200 MB matrix": ["show", old, "-o", str(d / "t.txt")],
            "merge: two 200 MB matrices": ["merge", old, new, "-o", str(d / "f.json")],
            "diff: two 200 MB matrices": ["diff", old, new],
            "gate: two 200 MB matrices": ["gate", "--baseline", old, "--current", new],
        }
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--big", type=Path)
    a = ap.parse_args()
    d = a.out or Path(tempfile.mkdtemp(prefix="probe-hostile-"))
    d.mkdir(parents=True, exist_ok=True)
    rows = _scan_rows(d) | _matrix_rows(d, a.big)
    print(f"{'input':44s} exit  peak RSS   wall")
    for name, args in rows.items():
        r = run_probe(*args, timeout=600)
        tb = "  TRACEBACK" if "Traceback" in r.err else ""
        print(f"{name:44s} {r.rc:4d}  {r.peak_rss_mb:5.0f} MB  {r.wall_s:5.1f} s{tb}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
