#!/usr/bin/env python3
"""Build FlashInfer's CUTLASS fused-MoE module ahead of time; install it where FlashInfer loads AOT modules.

FlashInfer compiles its CUTLASS fused-MoE module (``fused_moe_90`` for sm_90: 182 translation units) the
first time a ``flashinfer_cutlass`` MoE layer runs, unless the image ships it prebuilt (the
``flashinfer-jit-cache`` wheel). Without that wheel the first run spends 30 minutes or more in nvcc,
and a machine that loses its JIT cache (a fresh container, a lent GPU) pays it again. This script
builds the module once, with FlashInfer's own ``JitSpec`` (same generated sources, same nvcc flags as
its JIT), and copies it to ``flashinfer/data/aot/<name>/<name>.so`` — the layout ``flashinfer-jit-cache``
ships, which FlashInfer then loads without running ninja.

The compile can be spread over machines: objects compiled on one host (a CPU-only host with the same
nvcc version suffices) are packed, carried, and only the rest is compiled where the module is linked
(the link needs ``libcuda``, so it runs on the GPU machine or against a stub).

    # where torch + flashinfer-python are installed (the same versions as the image), nvcc on PATH:
    python3 scripts/flashinfer_aot.py --sm 90 build --jobs 16          # compile, link, install
    # or in two places:
    python3 scripts/flashinfer_aot.py --sm 90 build --compile-only --jobs 2  # CPU host: objects only
    python3 scripts/flashinfer_aot.py --sm 90 objects --pack objs.tar.xz    # pack what it compiled
    python3 scripts/flashinfer_aot.py --sm 90 build --objects objs.tar.xz --report aot.json  # GPU host
    # (--reverse compiles from the end of the list: two hosts at once, one from each end)

``--sm N`` picks ``flashinfer.jit.fused_moe:gen_cutlass_fused_moe_smN_module`` (90, 100, 120 in FlashInfer
0.6); ``--generator MODULE:FUNCTION`` names another ``JitSpec`` generator. Set
``FLASHINFER_CUDA_ARCH_LIST`` (e.g. ``9.0a``) on a host without the GPU. Headers the module includes that
a bare toolkit may lack (``cublasLt.h``, ``curand_kernel.h``) are taken from the pip ``nvidia-*`` wheels
when present. Exit status 0 when the module is installed, 1 otherwise (the report says why).
"""

from __future__ import annotations

import argparse
import importlib
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

DONE = "flashinfer_aot.done"  # names of the objects this script has compiled completely, one per line


def load_spec(generator: str) -> Any:
    """FlashInfer's ``JitSpec`` from ``module:function``."""
    module, _, func = generator.partition(":")
    try:
        return getattr(importlib.import_module(module), func)()
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"flashinfer_aot.py: cannot get the JitSpec from {generator}: {exc}") from exc


def _wheel_headers(dirs: list[Path]) -> Path | None:
    """A folder of links to the pip wheels' cuBLAS / cuRAND headers the toolkit folders lack (only those
    families: the rest of the wheel's include folder would shadow the toolkit's headers)."""
    only = Path(tempfile.mkdtemp(prefix="flashinfer_aot_inc_"))
    for probe_h, family in (("cublasLt.h", "cublas*.h"), ("curand_kernel.h", "curand*.h")):
        if any((d / probe_h).exists() for d in dirs):
            continue
        for p in sys.path:
            for h in (Path(p) / "nvidia" / "cu13" / "include").glob(family):
                if not (only / h.name).exists():
                    (only / h.name).symlink_to(h)
    return only if any(only.iterdir()) else None


def include_path() -> str | None:
    """CPATH for the host compiler: the toolkit's headers, then the pip wheels' missing ones."""
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), nvcc and str(Path(nvcc).resolve().parents[1]), "/usr/local/cuda"]
    incs = [Path(h) / "include" for h in homes if h]
    dirs = list(dict.fromkeys(d for d in incs if (d / "cuda.h").exists()))
    extra = _wheel_headers(dirs)
    if extra:
        dirs.append(extra)
    found = [str(d) for d in dirs if d.is_dir()]
    return os.pathsep.join(found) if found else None


def library_path() -> str | None:
    """LIBRARY_PATH fallback for the link: unversioned links to the pip CUDA libraries (nvidia-cuda-nvrtc
    ships only ``libnvrtc.so.13``), searched after the toolkit's ``-L`` folders."""
    links = Path(tempfile.mkdtemp(prefix="flashinfer_aot_lib_"))
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
    import ninja  # type: ignore[import-not-found]  # the pip package (a FlashInfer dependency) when no ninja is on PATH

    return str(Path(ninja.BIN_DIR) / "ninja")


def commands(spec: Any) -> list[str]:
    """FlashInfer's own build commands for the module on this host (compiles, then the link last)."""
    spec.write_ninja()
    so = str(spec.build_dir / f"{spec.name}.so")
    out = subprocess.run(
        [_ninja(), "-C", str(spec.build_dir), "-f", str(spec.ninja_path), "-t", "commands", so],
        check=True,
        capture_output=True,
        text=True,
    )
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def output_of(cmd: str) -> str:
    args = shlex.split(cmd)
    return args[args.index("-o") + 1]


def finished_objects(build_dir: Path) -> list[Path]:
    """Objects finished by ninja (``.ninja_log``) or by this script (``flashinfer_aot.done``); a compile in
    flight may have left a partial file, which is never packed."""
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


def unpack(spec: Any, objects: str | None) -> set[str]:
    """The objects already here, plus those of an archive from ``objects --pack``."""
    carried = {p.name for p in finished_objects(spec.build_dir)}
    if objects and Path(objects).exists():
        with tarfile.open(objects, "r:xz") as tar:
            members = [
                m for m in tar.getmembers() if m.isfile() and "/" not in m.name and m.name.endswith(".o")
            ]
            if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and security releases before)
                tar.extractall(spec.build_dir, members=members, filter="data")
            else:
                tar.extractall(spec.build_dir, members=members)
            carried |= {m.name for m in members}
        (spec.build_dir / DONE).write_text("".join(f"{n}\n" for n in sorted(carried)))
    return carried


def _compile(cmd: str, env: dict[str, str]) -> tuple[str, float, int, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True)
    return output_of(cmd), time.perf_counter() - t0, r.returncode, (r.stdout + r.stderr)[-3000:]


def compile_all(spec: Any, todo: list[str], jobs: int, env: dict[str, str]) -> list[dict[str, Any]]:
    """Run the compile commands ``jobs`` at a time; each finished object is noted in ``DONE``."""
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
    return done


def link_and_install(spec: Any, link: str, env: dict[str, str]) -> dict[str, Any]:
    libs = library_path()
    if libs:
        env = {**env, "LIBRARY_PATH": os.pathsep.join(p for p in (env.get("LIBRARY_PATH"), libs) if p)}
    t0 = time.perf_counter()
    r = subprocess.run(link, shell=True, env=env, capture_output=True, text=True)
    out: dict[str, Any] = {"link_s": round(time.perf_counter() - t0, 1), "link_rc": r.returncode}
    if r.returncode:
        print(r.stdout + r.stderr, flush=True)
        return out
    aot = Path(spec.aot_path)
    aot.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(spec.build_dir / f"{spec.name}.so", aot)
    return {**out, "aot_path": str(aot), "aot_bytes": aot.stat().st_size}


def build(
    spec: Any, objects: str | None, jobs: int, report: str | None, reverse: bool = False, link: bool = True
) -> int:
    """Compile what is missing, then (``link``) link and install; 0 when the module is installed (or, with
    ``link=False``, when every object compiled)."""
    *compiles, link_cmd = commands(spec)
    carried = unpack(spec, objects)
    todo = [c for c in compiles if Path(output_of(c)).name not in carried]
    if reverse:  # two hosts at once: one from each end of the list
        todo.reverse()
    env = dict(os.environ)
    inc = include_path()
    if inc:
        env["CPATH"] = os.pathsep.join(p for p in (inc, env.get("CPATH")) if p)
    print(f"{len(compiles)} objects: {len(carried)} carried, {len(todo)} to compile, {jobs} jobs", flush=True)
    t0 = time.perf_counter()
    done = compile_all(spec, todo, jobs, env)
    failed = [d for d in done if d["rc"]]
    summary: dict[str, Any] = {
        "module": spec.name,
        "carried": len(carried),
        "compiled": len(todo),
        "failed": len(failed),
        "compile_wall_s": round(time.perf_counter() - t0, 1),
        "objects": done,
    }
    if not failed and link:
        summary.update(link_and_install(spec, link_cmd, env))
    if report:
        Path(report).write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "objects"}), flush=True)
    return 0 if summary.get("aot_path") or (not link and not failed) else 1


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="flashinfer_aot.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--sm", type=int, help="GPU generation: 90, 100, 120 (the module fused_moe_<sm>)")
    ap.add_argument("--generator", help="a FlashInfer JitSpec generator, MODULE:FUNCTION (instead of --sm)")
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("objects", help="pack the objects compiled on this host so far")
    p.add_argument("--pack", required=True, metavar="OUT.tar.xz")
    b = sub.add_parser("build", help="compile the missing objects, link, install as a FlashInfer AOT module")
    b.add_argument("--objects", metavar="IN.tar.xz", help="objects compiled elsewhere (`objects --pack`)")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiles at once (default: cores)")
    b.add_argument("--report", metavar="OUT.json", help="write per-object compile times and the result here")
    b.add_argument("--reverse", action="store_true", help="compile from the end of the list")
    b.add_argument("--compile-only", action="store_true", help="no link (a host without libcuda)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if (args.sm is None) == (args.generator is None):
        ap.error("give one of --sm N or --generator MODULE:FUNCTION")
    generator = args.generator or f"flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm{args.sm}_module"
    spec = load_spec(generator)
    if args.verb == "objects":
        pack(spec, args.pack)
        return 0
    return build(spec, args.objects, args.jobs, args.report, args.reverse, link=not args.compile_only)


if __name__ == "__main__":
    sys.exit(main())
