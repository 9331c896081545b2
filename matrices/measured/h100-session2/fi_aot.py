"""Build FlashInfer's CUTLASS fused-MoE module for sm_90 (``fused_moe_90``) as an AOT module, its compile
spread over two hosts, and install it where FlashInfer loads prebuilt modules (``flashinfer/data/aot``,
the layout the ``flashinfer-jit-cache`` wheel ships).

Why: the module is 182 translation units; a cold JIT build took longer than any one 10-minute device
call (issue 11), and the lent machine loses its JIT cache when it goes back. So the objects are compiled
ahead where time is free (this repository's CPU host, nvcc 13.0 — the device's toolkit), carried, and
only the rest is compiled on the GPU machine. Same FlashInfer version (0.6.14), same generated sources,
same nvcc flags: FlashInfer's own ``JitSpec`` writes the commands on each host.

  # CPU host (torch + flashinfer-python 0.6.14 in a venv; cuBLAS headers from nvidia-cublas):
  python3 fi_aot.py objects --pack OUT.tar.xz            # pack the objects compiled so far
  # GPU machine, after staging vLLM + FlashInfer:
  python3 fi_aot.py build --objects OUT.tar.xz --jobs 16  # compile the rest, link, install as AOT
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def _spec(generator: str) -> Any:
    import importlib

    module, func = generator.split(":")
    return getattr(importlib.import_module(module), func)()


GENERATOR = "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm90_module"


def _include_path() -> str | None:
    """CPATH for the host compiler: the toolkit's headers, then the pip wheels' cuBLAS and cuRAND headers
    (``cublasLt.h``, ``curand_kernel.h``: the module includes them and a bare toolkit may lack them)."""
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), nvcc and str(Path(nvcc).resolve().parents[1]), "/usr/local/cuda"]
    incs = [Path(h) / "include" for h in homes if h]
    dirs = list(dict.fromkeys(d for d in incs if (d / "cuda.h").exists()))
    only = Path(tempfile.mkdtemp(prefix="fi_aot_inc_"))  # only the missing families: the rest of that
    for probe_h, family in (("cublasLt.h", "cublas*.h"), ("curand_kernel.h", "curand*.h")):  # folder
        if any((d / probe_h).exists() for d in dirs):  # would shadow the toolkit's headers
            continue
        for p in sys.path:
            for h in (Path(p) / "nvidia" / "cu13" / "include").glob(family):
                if not (only / h.name).exists():
                    (only / h.name).symlink_to(h)
    if any(only.iterdir()):
        dirs.append(only)
    found = [str(d) for d in dirs if d.is_dir()]
    return os.pathsep.join(found) if found else None


def _library_path() -> str | None:
    """LIBRARY_PATH fallback for the link: unversioned links to the pip CUDA libraries (nvidia-cuda-nvrtc
    ships only ``libnvrtc.so.13``), searched after the toolkit's ``-L`` folders."""
    links = Path(tempfile.mkdtemp(prefix="fi_aot_lib_"))
    for p in sys.path:
        for name in ("nvrtc", "cudart"):
            for lib in sorted((Path(p) / "nvidia" / "cu13" / "lib").glob(f"lib{name}.so.*")):
                target = links / f"lib{name}.so"
                if not target.exists() and lib.name.count(".") == 2:  # libX.so.13, not libX.so.13.0.88
                    target.symlink_to(lib)
    return str(links) if any(links.iterdir()) else None


def _ninja() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    import ninja  # the pip package (FlashInfer's dependency) when no ninja is on PATH

    return str(Path(ninja.BIN_DIR) / "ninja")


def commands(spec: Any) -> list[str]:
    """FlashInfer's own build commands for the module on this host (compiles, then the link last)."""
    spec.write_ninja()
    so = str(spec.build_dir / f"{spec.name}.so")
    out = subprocess.run(
        [_ninja(), "-C", str(spec.build_dir), "-f", str(spec.ninja_path), "-t", "commands", so],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def output_of(cmd: str) -> str:
    args = shlex.split(cmd)
    return args[args.index("-o") + 1]


DONE = "fi_aot.done"  # names of the objects this script has compiled completely, one per line


def finished_objects(build_dir: Path) -> list[Path]:
    """Objects finished by ninja (``.ninja_log``) or by this script (``fi_aot.done``); a compile in
    flight may have left a partial file, which is not packed."""
    log = build_dir / ".ninja_log"
    done = set((build_dir / DONE).read_text().split()) if (build_dir / DONE).exists() else set()
    if log.exists():
        for line in log.read_text().splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4 and parts[3].endswith(".o"):
                done.add(Path(parts[3]).name)
    return sorted(p for p in build_dir.glob("*.o") if p.name in done)


def pack(spec: Any, dest: str) -> None:
    objs = finished_objects(spec.build_dir)
    with tarfile.open(dest, "w:xz") as tar:
        for p in objs:
            tar.add(p, arcname=p.name)
    print(f"packed {len(objs)} objects into {dest} ({Path(dest).stat().st_size >> 20} MiB)")


def _compile(cmd: str, env: dict[str, str]) -> tuple[str, float, int, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True)
    return output_of(cmd), time.perf_counter() - t0, r.returncode, (r.stdout + r.stderr)[-3000:]


def build(spec: Any, objects: str | None, jobs: int, report: str | None, reverse: bool = False) -> int:
    cmds = commands(spec)
    *compiles, link = cmds
    carried = {p.name for p in finished_objects(spec.build_dir)}  # compiled here before
    if objects and Path(objects).exists():
        with tarfile.open(objects, "r:xz") as tar:
            tar.extractall(spec.build_dir)  # our own archive
            carried |= {m.name for m in tar.getmembers()}
        (spec.build_dir / DONE).write_text("".join(f"{n}\n" for n in sorted(carried)))
    todo = [c for c in compiles if Path(output_of(c)).name not in carried]
    if reverse:  # two hosts at once: one from each end of the list
        todo.reverse()
    env = dict(os.environ)
    inc = _include_path()
    if inc:
        env["CPATH"] = inc + (os.pathsep + env["CPATH"] if env.get("CPATH") else "")
    print(f"{len(compiles)} objects: {len(carried)} carried, {len(todo)} to compile, {jobs} jobs", flush=True)
    t0 = time.perf_counter()
    done: list[dict[str, Any]] = []
    with ThreadPoolExecutor(jobs) as pool:
        for out, secs, rc, log in pool.map(lambda c: _compile(c, env), todo):
            done.append({"object": Path(out).name, "s": round(secs, 1), "rc": rc})
            if rc == 0:
                with open(spec.build_dir / DONE, "a") as f:
                    f.write(Path(out).name + "\n")
            print(f"[{len(done)}/{len(todo)}] rc={rc} {secs:.0f}s {Path(out).name}", flush=True)
            if rc:
                print(log, flush=True)
    failed = [d for d in done if d["rc"]]
    summary: dict[str, Any] = {
        "carried": len(carried),
        "compiled": len(todo),
        "failed": len(failed),
        "compile_wall_s": round(time.perf_counter() - t0, 1),
        "objects": done,
    }
    libs = _library_path()
    if libs:
        env["LIBRARY_PATH"] = env["LIBRARY_PATH"] + os.pathsep + libs if env.get("LIBRARY_PATH") else libs
    if not failed:
        t1 = time.perf_counter()
        r = subprocess.run(link, shell=True, env=env, capture_output=True, text=True)
        summary["link_s"], summary["link_rc"] = round(time.perf_counter() - t1, 1), r.returncode
        if r.returncode == 0:
            aot = spec.aot_path
            aot.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(spec.build_dir / f"{spec.name}.so", aot)
            summary["aot_path"], summary["aot_bytes"] = str(aot), aot.stat().st_size
        else:
            print(r.stdout + r.stderr, flush=True)
    if report:
        Path(report).write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "objects"}), flush=True)
    return 0 if summary.get("aot_path") else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("objects", help="pack the objects compiled on this host so far")
    p.add_argument("--pack", required=True)
    b = sub.add_parser("build", help="compile the missing objects, link, install as FlashInfer AOT module")
    b.add_argument("--objects", help="archive from `objects --pack`")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    b.add_argument("--report", help="write per-object compile times here (JSON)")
    b.add_argument("--reverse", action="store_true", help="compile from the end of the list")
    ap.add_argument("--generator", default=GENERATOR, help="FlashInfer JitSpec generator (module:function)")
    args = ap.parse_args()
    spec = _spec(args.generator)
    if args.verb == "objects":
        pack(spec, args.pack)
        return 0
    return build(spec, args.objects, args.jobs, args.report, args.reverse)


if __name__ == "__main__":
    sys.exit(main())
