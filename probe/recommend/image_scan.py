"""The image an answer is for, read by probe's own scan: ``recommend --image PATH`` / ``--python PY``.

The per-kernel scan (``probe scan --kernels --backends``: :mod:`probe.arch`) of a wheel, an image tarball
or OCI layout, a folder, or another interpreter's site-packages, reduced to what an answer reads: the
distributions with their versions, and each backend's verdict on the GPU asked about. A ``probe scan
--json`` report given as the image is read as it is. The scan cache makes a second answer for the same
image cheap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import BadInputError, UsageError

if TYPE_CHECKING:
    from probe.catalog.gpus import Gpu


def _scan_report_file(path: Path) -> dict[str, Any] | None:
    """A ``probe scan --json`` report given as the image (None: the path is something to scan)."""
    if not (path.is_file() and path.suffix == ".json"):
        return None
    from probe.recommend.answer_version import read_scan_document

    return read_scan_document(path)


def _roots(image: str | None, python: str | None) -> list[str]:
    from probe.arch.scanner import default_roots

    roots = [str(Path(image).resolve())] if image else []
    return roots + (default_roots(python) if python else [])


def scan_image(image: str | None, python: str | None, gpus: list[Gpu]) -> dict[str, Any]:
    """The scan document of the image (see the module docstring), with verdicts for ``gpus``."""
    if image is not None:
        path = Path(image)
        if not path.exists():
            raise UsageError(f"--image {image}: no such file or folder")
        doc = _scan_report_file(path)
        if doc is not None:
            return doc
    from probe.arch.backend_view import backends_json
    from probe.arch.scanner import build_report, scan_inputs

    roots = _roots(image, python)
    found = scan_inputs(roots, kernels=True, use_cache=True)
    if not found.files:
        raise BadInputError(f"{image or python}: no compiled extension found to scan")
    report = build_report(found.files, gpus, source="argument", per_kernel=True, roots=roots,
                          environments=found.environments)  # fmt: skip
    files = [{"package": f.package, "package_version": f.package_version} for f in report.files if f.package]
    envs = [e.to_dict() for e in (found.environments or [])]
    doc = {"files": files, "environments": envs, "backends": backends_json(report, gpus)}
    return json.loads(json.dumps(doc, default=str))  # plain JSON values, as a report file holds them
