"""Loadability rules: can a GPU of compute capability X run code built for target T?

Rules (CUDA Programming Guide "Feature Availability" + the family table, PyTorch's iGPU
exceptions, and driver behaviour measured on an H200; see docs/fatbin.md §7):

SASS ``sm_N``   plain: same major, N's minor <= device minor (iGPUs such as Orin: exact only)
                ``a``: exactly N            ``f``: the device is in N's family
PTX  ``compute_N`` plain: device >= N (any major; costs a JIT at first load and needs a driver
                that knows the PTX ISA version)   ``a``: exactly N   ``f``: family
The driver prefers any compatible SASS over PTX; verdicts rank the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from probe.catalog.gpus import Gpu, catalog


class LoadVerdict(str, Enum):
    SASS = "sass"
    SASS_COMPATIBLE = "sass-compatible"
    PTX_JIT = "ptx-jit"
    NONE = "none"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def loadable(self) -> bool:
        return self is not LoadVerdict.NONE


_RANK = {LoadVerdict.SASS: 3, LoadVerdict.SASS_COMPATIBLE: 2, LoadVerdict.PTX_JIT: 1, LoadVerdict.NONE: 0}

CodeKind = Literal["sass", "ptx"]
_LABEL_RE = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")


@dataclass(frozen=True, order=True)
class Code:
    """One compiled target: SASS for ``sm_<sm><suffix>`` or PTX for ``compute_<sm><suffix>``."""

    kind: CodeKind
    sm: int
    suffix: Literal["", "a", "f"] = ""
    ptx_isa: str | None = None

    @property
    def label(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.sm}{self.suffix}"

    @classmethod
    def parse(cls, label: str, ptx_isa: str | None = None) -> Code:
        m = _LABEL_RE.match(label.strip())
        if not m:
            raise ValueError(f"not a CUDA target label: {label!r} (expected sm_90a, compute_80, ...)")
        kind: CodeKind = "sass" if m.group(1) == "sm" else "ptx"
        return cls(kind, int(m.group(2)), m.group(3), ptx_isa)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Decision:
    verdict: LoadVerdict
    code: Code | None
    reason: str
    min_driver: str | None = None  # for ptx-jit: the CUDA driver version that knows this PTX ISA

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict.value,
            "via": self.code.label if self.code else None,
            "reason": self.reason,
            "min_driver": self.min_driver,
        }


def _family(sm: int) -> list[int]:
    return catalog().family_members(sm)


def decide(code: Code, gpu: Gpu) -> Decision:
    """LoadVerdict for one compiled target on one device."""
    dev = gpu.sm
    if code.kind == "sass":
        if code.sm in gpu.legacy_sm:
            return Decision(
                LoadVerdict.SASS_COMPATIBLE, code, f"{code.label} is this GPU's pre-CUDA-13 name (sm_{dev})"
            )
        if code.suffix == "a":
            if code.sm == dev:
                return Decision(LoadVerdict.SASS, code, f"{code.label} is arch-specific to sm_{dev}")
            return Decision(LoadVerdict.NONE, code, f"{code.label} runs only on exactly sm_{code.sm}")
        if code.suffix == "f":
            members = _family(code.sm)
            if dev in members:
                v = LoadVerdict.SASS if code.sm == dev else LoadVerdict.SASS_COMPATIBLE
                return Decision(v, code, f"{code.label} family covers sm_{dev}")
            return Decision(
                LoadVerdict.NONE,
                code,
                f"{code.label} family covers only {', '.join(f'sm_{m}' for m in members)}",
            )
        if code.sm // 10 != dev // 10:
            return Decision(LoadVerdict.NONE, code, f"{code.label} SASS runs only on major {code.sm // 10}")
        if code.sm % 10 > dev % 10:
            return Decision(LoadVerdict.NONE, code, f"{code.label} SASS needs minor >= {code.sm % 10}")
        if code.sm != dev and gpu.igpu_exact_sass_only:
            return Decision(
                LoadVerdict.NONE, code, f"integrated GPU sm_{dev} does not load dGPU SASS {code.label}"
            )
        if code.sm == dev:
            return Decision(LoadVerdict.SASS, code, f"{code.label} SASS matches")
        return Decision(LoadVerdict.SASS_COMPATIBLE, code, f"{code.label} SASS runs on sm_{dev} (same major)")

    # PTX
    driver = min_driver_for_ptx(code.ptx_isa)
    jit_note = "JIT-compiled by the driver at first load"
    if driver:
        jit_note += f"; needs a driver for CUDA >= {driver} (PTX ISA {code.ptx_isa})"
    if code.suffix == "a":
        if code.sm == dev:
            return Decision(LoadVerdict.PTX_JIT, code, jit_note, driver)
        return Decision(LoadVerdict.NONE, code, f"{code.label} PTX runs only on exactly sm_{code.sm}")
    if code.suffix == "f":
        if dev in _family(code.sm):
            return Decision(LoadVerdict.PTX_JIT, code, jit_note, driver)
        return Decision(LoadVerdict.NONE, code, f"{code.label} PTX is for the {code.sm}f family only")
    if code.sm <= dev:
        return Decision(LoadVerdict.PTX_JIT, code, jit_note, driver)
    return Decision(LoadVerdict.NONE, code, f"{code.label} PTX needs sm_{code.sm} or newer")


def best(codes: Iterable[Code], gpu: Gpu) -> Decision:
    """The verdict the driver would reach for a set of targets (one module / kernel / file).

    SASS beats PTX; among SASS the exact match beats a compatible one; among PTX the newest
    loadable one is reported (that is what the JIT would pick up first).
    """
    winner: Decision | None = None
    rejected: list[Decision] = []
    for code in codes:
        d = decide(code, gpu)
        if not d.verdict.loadable:
            rejected.append(d)
            continue
        if winner is None or (d.verdict.rank, d.code.sm if d.code else 0) > (
            winner.verdict.rank,
            winner.code.sm if winner.code else 0,
        ):
            winner = d
    if winner is not None:
        return winner
    if not rejected:
        return Decision(LoadVerdict.NONE, None, "no device code")
    labels = ", ".join(sorted({d.code.label for d in rejected if d.code}))
    return Decision(LoadVerdict.NONE, None, f"no code loadable on sm_{gpu.sm} (has {labels})")


def min_driver_for_ptx(ptx_isa: str | None) -> str | None:
    """Minimum CUDA driver version for a PTX ISA version (e.g. '9.0' -> '13.0')."""
    if not ptx_isa:
        return None
    table = catalog().ptx_isa_min_driver
    if ptx_isa in table:
        return table[ptx_isa]
    try:
        major, minor = (int(x) for x in ptx_isa.split("."))
    except ValueError:
        return None
    if major >= 9:  # PTX ISA 9.x ships with CUDA 13.x
        return f"13.{minor}"
    return None
