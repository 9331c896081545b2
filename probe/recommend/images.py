"""Evidence bound to the image asked about: what a run on another image, or a field report, says here.

A measured cell ran in one image (its matrix's ``provenance.versions``); the answer is for one image too
(:class:`Image`: the ``--image`` / ``--python`` / ``--scan`` it was given, else the running environment
when it holds vLLM, else none known). Two rules follow:

* **A missing package is that image's, not the backend's.** A failure of another image whose cause is
  a package it lacked (``import_error``, ``No module named …``, vLLM's ``Reason: ['ImportError']``; a field
  report's ``import_error``: that image's packaging) never rules a backend out here: the cell is set aside
  with the module it lacked, and the answer's ``needs`` says what to install. The same failure in the
  image asked about still counts.
* **Another build's success needs the same kernels.** A backend seen working elsewhere (a field report,
  often of a source build; a measured run of another image) does not count for a backend whose kernels
  the answer's own image scan (``--image`` / ``--scan``, else the published static predictions of the
  answer's vLLM release) says do not load on this GPU for the model's quant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from probe.recommend.types import EvidenceCell, Request

#: provenance.versions keys of the packages whose versions tell two images apart
IMAGE_PACKAGES = ("vllm", "torch", "flashinfer", "flash_attn", "triton", "cutlass_dsl")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_IMPORT_REASON = re.compile(r"Reason: \[[^\]]*'ImportError'")


@dataclass(frozen=True)
class Image:
    """The image an answer is for: ``versions`` by provenance key (None: a package it does not hold)."""

    label: str
    versions: dict[str, str | None]

    def same_as(self, cell_versions: dict[str, Any] | None) -> bool:
        """Whether a measured cell's image (its matrix's versions) is this one."""
        if not cell_versions:
            return False
        return all(self.versions.get(k) == _public(cell_versions.get(k) or None) for k in IMAGE_PACKAGES)


#: the distributions behind each provenance key (pip names as a scan reports them)
_DISTRIBUTIONS = {
    "vllm": ("vllm",),
    "torch": ("torch",),
    "flashinfer": ("flashinfer-python", "flashinfer_python", "flashinfer"),
    "flash_attn": ("flash-attn", "flash_attn"),
    "triton": ("triton", "pytorch-triton"),
    "cutlass_dsl": ("nvidia-cutlass-dsl", "nvidia_cutlass_dsl"),
}


def _public(version: str | None) -> str | None:
    return version.split("+", 1)[0] if version else None


def image_of(label: str, versions: dict[str, str]) -> Image:
    """The image of a scan (distribution -> version) in provenance keys."""
    keyed = {
        k: _public(next((versions[d] for d in ds if versions.get(d)), None))
        for k, ds in _DISTRIBUTIONS.items()
    }
    return Image(label, keyed)


def running_image() -> Image | None:
    """The environment probe runs in, when it holds vLLM (``probe recommend`` inside the image): its
    distributions' versions from the ``*.dist-info`` folders beside vLLM (no import, no metadata API)."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    versions: dict[str, str] = {}
    try:
        for p in site.iterdir():
            if p.suffix == ".dist-info" and "-" in p.stem:
                name, _, version = p.stem.rpartition("-")
                versions[name.lower().replace("_", "-")] = version
    except OSError:
        return None
    return image_of(f"this environment ({site})", versions)


def missing_package(c: EvidenceCell) -> str | None:
    """The module a failed cell's image lacked (top level), ``"?"`` when vLLM only said ImportError, or None
    when the failure has another cause."""
    if not c.failed:
        return None
    text = str(c.get("root_cause") or "")
    m = _NO_MODULE.search(text)
    if m:
        return m.group(1).split(".")[0]
    if c.get("outcome") == "import_error" or _IMPORT_REASON.search(text):
        return "?"
    return None


def _scan_refuses(
    scans: list[EvidenceCell], req: Request, key: tuple[str, str, Any], memo: dict[tuple[str, str, Any], bool]
) -> bool:
    """Whether this image's ELF scan says the (role, backend, FA version) kernels do not load here (the
    scan's cells only, each answer kept: ``bind`` asks once per backend, not once per cell)."""
    from probe.recommend.verdict import scan_cell

    if key not in memo:
        cell = scan_cell(scans, req, *key)
        memo[key] = cell is not None and cell.failed
    return memo[key]


def _halves_of(c: EvidenceCell) -> list[tuple[str, str, Any]]:
    if c.kind == "engine":
        moe, _, attn = str(c.get("backend") or "").partition("+")
        moe = str(c.get("moe_backend") or moe)
        attn = str(c.get("attention_backend") or attn)
        out = [("attention", attn, c.get("fa_version"))]
        return out + ([("moe", moe, None)] if moe and moe != "auto" else [])
    if c.kind in ("moe", "attention"):
        return [(str(c.kind), str(c.get("backend")), c.get("fa_version"))]
    return []


def other_build_without_kernels(
    scans: list[EvidenceCell], req: Request, c: EvidenceCell, memo: dict[tuple[str, str, Any], bool]
) -> bool:
    """A success of another image (a report, a measured run elsewhere) for a backend whose kernels this
    image's scan (``scans``: its cells) says do not load here."""
    if not c.ok or c.get("here") or c.evidence not in ("reported", "measured"):
        return False
    return any(_scan_refuses(scans, req, half, memo) for half in _halves_of(c))


def bind(mine: list[EvidenceCell], req: Request, image: Image | None) -> list[EvidenceCell]:
    """The cells as evidence for the image asked about (see the module docstring): measured cells marked
    ``here`` (this image or not), another image's missing-package failures set aside (``lacked``), another
    build's successes without kernels here dropped."""
    out = []
    for c in mine:
        if c.evidence == "measured":
            here = image is not None and image.same_as(c.image_versions)
            c = replace(c, cell={**c.cell, "here": here})
            lacked = None if here else missing_package(c)
            if lacked is not None:
                c = replace(c, lacked=lacked)
        elif c.evidence == "reported":
            from probe.recommend.report_match import is_model

            c = replace(c, cell={**c.cell, "this_model": is_model(req, c.get("model"))})
            if c.get("outcome") == "import_error":
                c = replace(c, lacked=missing_package(c) or "?")  # that image's packaging, not the backend
        out.append(c)
    from probe.recommend.verdict import is_scan

    scans = [c for c in out if is_scan(c)]
    memo: dict[tuple[str, str, Any], bool] = {}
    return [c for c in out if not other_build_without_kernels(scans, req, c, memo)]
