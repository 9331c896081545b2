#!/usr/bin/env python3
"""Rebuild what the published matrices derive from the catalogs, in one command: vLLM's own checks per
published vLLM release (``matrices/predicted/vllm-<V>/``), optionally the static predictions
(``matrices/static/``), then the matrices index (``matrices/README.md``).

    python3 scripts/publish_predictions.py --targets sm_125 --static   # after adding a GPU to gpus.json
    python3 scripts/publish_predictions.py                             # every GPU, every published release
    python3 scripts/publish_predictions.py --versions 0.33.0 --models 122b,35b

Each release is asked through the interpreter of a venv holding that release's own PyPI stack,
``VENVS/venv-vllm-<V>/bin/python`` (default ``VENVS``: ``~/.cache/probe-tests``); ``--create`` makes a
missing one (``python3 -m venv`` + ``pip install vllm==<V>``, several GB each). The oracle child needs a
CUDA build of torch but no GPU (docs/predict.md "Commands"). A release whose venv is missing is reported
and skipped; the exit code is 1 when any was. ``--dry-run`` prints the commands only.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREDICTED = ROOT / "matrices" / "predicted"
DEFAULT_VENVS = Path.home() / ".cache" / "probe-tests"


def published_versions() -> list[str]:
    """The vLLM releases with a published prediction set (``matrices/predicted/vllm-<V>/``)."""
    return sorted(
        (p.name.removeprefix("vllm-") for p in PREDICTED.glob("vllm-*") if p.is_dir()),
        key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()),
    )


def venv_python(venvs: Path, version: str) -> Path:
    return venvs / f"venv-vllm-{version}" / "bin" / "python"


def create_venv(venvs: Path, version: str) -> list[list[str]]:
    """The commands that make the venv of one release."""
    venv = venvs / f"venv-vllm-{version}"
    return [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", f"vllm=={version}"],
    ]


def predict_command(python: Path, version: str, args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "probe",
        "predict",
        "--python",
        str(python),
        "-o",
        str(PREDICTED / f"vllm-{version}"),
    ]
    for target in args.targets:
        cmd += ["--target", target]
    if args.models:
        cmd += ["--models", args.models]
    return cmd


def _run(cmd: list[str], dry_run: bool) -> int:
    print("+ " + shlex.join(cmd), flush=True)
    return 0 if dry_run else subprocess.run(cmd, cwd=ROOT, check=False).returncode


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", type=lambda s: [t for t in s.split(",") if t], default=[],
                    help="comma-separated GPUs (default: the whole GPU catalog)")  # fmt: skip
    ap.add_argument("--versions", type=lambda s: [v for v in s.split(",") if v], default=None,
                    help="comma-separated vLLM releases (default: every published one)")  # fmt: skip
    ap.add_argument("--models", help="comma-separated model profiles (default: all)")
    ap.add_argument("--venvs", type=Path, default=DEFAULT_VENVS, help="folder of venv-vllm-<V> venvs")
    ap.add_argument("--create", action="store_true", help="make a release's venv when it is missing")
    ap.add_argument("--static", action="store_true", help="also rewrite matrices/static/ (wheel scan)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing: list[str] = []
    rebuilt = 0
    for version in args.versions or published_versions():
        python = venv_python(args.venvs, version)
        if not python.exists() and args.create:
            for cmd in create_venv(args.venvs, version):
                if _run(cmd, args.dry_run):
                    break
        if not python.exists() and not args.dry_run:
            print(f"vLLM {version}: no venv at {python.parent.parent} (--create makes it)", file=sys.stderr)
            missing.append(version)
        elif _run(predict_command(python, version, args), args.dry_run):
            missing.append(version)
        else:
            rebuilt += 1
    if args.static:
        static = _run([sys.executable, "scripts/publish_static_predictions.py"], args.dry_run)
        missing += ["static"] if static else []
        rebuilt += 0 if static else 1
    if rebuilt:
        _run(
            [sys.executable, "-m", "probe", "show", "--index", "matrices/", "-o", "matrices/README.md"],
            args.dry_run,
        )
    if missing:
        print(f"not rebuilt: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
