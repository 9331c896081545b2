"""The one vLLM version an answer speaks for, and whose own checks it uses.

A user runs one image with one vLLM: an answer's vLLM checks, static scan and flags all come from
that version. The version is, first found:

1. ``--vllm X.Y.Z``;
2. the vLLM of a scan report given with ``--scan`` (``probe scan --json`` of the image: a file's
   ``package_version``, or an image's ``environments``), else the vLLM asked with ``--ask-vllm``;
3. the vLLM installed beside this interpreter (``probe`` running inside the image);
4. the vLLM of the measured matrix of the asked GPU;
5. the newest version with published predictions.

vLLM's checks come from ``matrices/predicted/vllm-<version>/``; a version without published
predictions uses the nearest one that has them, and the answer says so.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probe.errors import BadInputError, UsageError
from probe.versions import parse_version

PREDICTIONS_PREFIX = "vllm-"


@dataclass(frozen=True)
class AnswerVersion:
    """The answer's vLLM (flags spelled for it) and the version whose predicted checks are used."""

    vllm: str | None
    source: str  # how it was chosen: "--vllm", "--scan", "installed", "measured", "newest predictions"
    predictions: str | None  # the predictions folder's version (nearest published), None: none
    note: str | None = None  # said in the answer when the predictions are not of ``vllm``

    @property
    def text(self) -> str:
        if not self.vllm:
            return "vLLM version unknown"
        return f"vLLM {self.vllm} ({self.source})"


def installed_vllm() -> str | None:
    """The version of the vLLM importable by this interpreter, from its ``*.dist-info`` folder (no
    import of vLLM, no importlib.metadata: both cost more than the whole answer may)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    try:
        names = [p.name for p in site.iterdir() if p.name.startswith("vllm-") and p.suffix == ".dist-info"]
    except OSError:
        return None
    return sorted(names)[-1][len("vllm-") : -len(".dist-info")] if names else None


@dataclass(frozen=True)
class ScanFacts:
    """What a ``probe scan --json`` report of the image says about it: its vLLM, its distributions (with
    their versions where the scan saw them) and, when it holds a backend view, that view."""

    vllm: str | None
    packages: frozenset[str]
    versions: dict[str, str] = field(default_factory=dict)  # distribution -> version
    document: dict[str, Any] | None = None  # the report, when it has a backend view (``backends``)


def read_scan_document(path: Path) -> dict[str, Any]:
    """A ``probe scan --json`` report, checked to be one."""
    from probe import safejson

    try:
        doc = safejson.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInputError(f"{path}: not a readable scan report ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise BadInputError(f"{path}: not a `probe scan --json` report (no 'files' list)")
    return doc


def scan_facts(doc: dict[str, Any]) -> ScanFacts:
    """The vLLM version a scan saw (``package_version`` of a vllm file, else an image environment's
    ``vllm``) and every distribution it saw (files' ``package``, environments' ``packages``)."""
    versions: dict[str, str] = {}
    packages: set[str] = set()
    for f in doc.get("files") or []:
        if isinstance(f, dict) and isinstance(f.get("package"), str):
            packages.add(f["package"])
            if f.get("package_version"):
                versions.setdefault(f["package"], str(f["package_version"]))
    for env in doc.get("environments") or []:
        found = (env.get("packages") or {}) if isinstance(env, dict) else {}
        if isinstance(found, dict):
            packages |= {str(k) for k in found}
            versions.update({str(k): str(v) for k, v in found.items() if v and str(k) not in versions})
    backends = doc.get("backends") if isinstance(doc.get("backends"), dict) else None
    return ScanFacts(versions.get("vllm"), frozenset(packages), versions, doc if backends else None)


def read_scan(path: Path) -> ScanFacts:
    """:func:`scan_facts` of a ``probe scan --json`` report file."""
    return scan_facts(read_scan_document(path))


def published_predictions(paths: Iterable[Path]) -> dict[str, Path]:
    """version -> folder, for the ``vllm-<version>/`` prediction folders under the matrix paths."""
    out: dict[str, Path] = {}
    for root in paths:
        if not root.is_dir():
            continue
        for folder in (root, root / "predicted"):
            if not folder.is_dir():
                continue
            for d in sorted(folder.iterdir()):
                version = d.name[len(PREDICTIONS_PREFIX) :]
                if d.name.startswith(PREDICTIONS_PREFIX) and parse_version(version) and d.is_dir():
                    out.setdefault(version, d)
    return out


def nearest(version: str, available: Iterable[str]) -> str | None:
    """The available version closest to ``version`` (same release first; a tie goes to the older)."""
    want = parse_version(version)
    if want is None:
        return None

    def distance(v: str) -> tuple[int, int, Any]:
        got = parse_version(v) or (0, 0, 0)
        return (abs(got[0] - want[0]), abs(got[1] - want[1]), got > want)

    ranked = sorted(available, key=lambda v: (distance(v), parse_version(v)))
    return ranked[0] if ranked else None


def newest(available: Iterable[str]) -> str | None:
    versions = [v for v in available if parse_version(v)]
    return max(versions, key=lambda v: parse_version(v) or ()) if versions else None


def check_version(text: str) -> str:
    """A ``--vllm`` value as written, or a usage error."""
    if parse_version(text) is None:
        raise UsageError(f"--vllm {text!r} is not a version", hint="e.g. --vllm 0.33.0")
    return text.strip().lstrip("v")


def choose(
    explicit: str | None,
    scan: ScanFacts | None,
    measured: str | None,
    available: Iterable[str],
    asked: str | None = None,
) -> AnswerVersion:
    """The answer's version (see the module docstring) and the predictions it uses."""
    published = list(available)
    picks = (
        (explicit and check_version(explicit), "--vllm"),
        (scan.vllm if scan is not None else None, "--scan"),
        (asked, "asked with --ask-vllm"),
        (installed_vllm(), "installed in this Python"),
        (measured, "of the measured matrix"),
        (newest(published), "newest with published predictions"),
    )
    version, source = next(((v, s) for v, s in picks if v), (None, "unknown"))
    if version is None:
        return AnswerVersion(None, source, None, "no vLLM version known and no predictions published")
    pred = version if version in published else nearest(version, published)
    note = None
    if pred is None:
        note = f"no vLLM checks published for any version; vLLM {version}'s own checks were not asked"
    elif pred != version:
        note = (
            f"no vLLM checks published for vLLM {version}; using those of vLLM {pred}, the nearest "
            f"(run `probe predict` with vLLM {version} for its own)"
        )
    return AnswerVersion(version, source, pred, note)
