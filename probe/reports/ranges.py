"""Where a field report applies in version space.

A report applies only inside its range. Per package the asked side knows (vLLM, FlashInfer, torch,
CUDA, …) and the report speaks of:

* before ``introduced_in``, or at / after ``fixed_in`` (a release), or after ``last_affected``: it does
  not apply;
* below ``fixed_in``, or at or below the newest version it was seen on: it applies (``in_range``);
* newer than every version it was seen on: an open report (``open_as_of``) still applies, flagged
  "seen up to X, open as of DATE" (``newer_than_seen``: nobody has said it was fixed); a report fixed
  by a PR whose release was not recorded does not (``maybe_fixed``: listed, never evidence);
* no package in common (the report states no versions, or only other stacks' such as SGLang): an
  open report applies with the note "versions unknown"; a fixed one does not (``maybe_fixed``).

Nothing asked (no version known on the asking side) is read the same way: open reports apply,
fixed ones do not — the answer is spelled for a recent vLLM. Where several packages are asked, a fix
or an ``introduced_in`` of any of them decides first; then vLLM's version decides between "in range"
and "newer than seen" (a CUDA version in range does not make a report on an older vLLM current).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from probe.reports.record import Report
from probe.versions import version_key

LABELS = {
    "vllm": "vLLM",
    "flashinfer": "FlashInfer",
    "cuda": "CUDA",
    "sglang": "SGLang",
    "tensorrt_llm": "TensorRT-LLM",
    "flash_attn": "flash-attn",
    "flash_attn_4": "flash-attn-4",
    "cutlass_dsl": "CUTLASS DSL",
}
APPLYING = ("in_range", "newer_than_seen", "unknown")


@dataclass(frozen=True)
class VersionStatus:
    state: str  # in_range / newer_than_seen / unknown / fixed / before / maybe_fixed
    note: str

    @property
    def applies(self) -> bool:
        return self.state in APPLYING


def label(pkg: str) -> str:
    return LABELS.get(pkg, pkg)


def seen_text(r: Report) -> str:
    """'vLLM 0.11.0-0.12.0, FlashInfer 0.5.2' (+ what the thread said without an exact version)."""
    parts = []
    for pkg, seen in r.versions.items():
        ordered = sorted(seen, key=lambda v: version_key(v) or ((0,), 0, 0, 0))
        span = ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"
        parts.append(f"{label(pkg)} {span}")
    text = ", ".join(parts)
    if r.versions_text:
        text = f"{text}; {r.versions_text}" if text else r.versions_text
    return text or "versions unknown"


def fix_text(r: Report) -> str:
    """'fixed in vLLM 0.12.0 (https://…/pull/1)', 'fixed by https://…/pull/1 (release not recorded)'."""
    rel = [f"{label(k)} {v}" for k, v in r.fixed_in.items() if k != "pr"]
    pr = r.fixed_in.get("pr")
    if rel:
        return "fixed in " + ", ".join(rel) + (f" ({pr})" if pr else "")
    return f"fixed by {pr} (release not recorded)" if pr else ""


def _per_package(r: Report, pkg: str, asked: str) -> str | None:
    a = version_key(asked)
    if a is None:
        return None
    intro, fixed, last = r.introduced_in.get(pkg), r.fixed_in.get(pkg), r.last_affected.get(pkg)
    seen = [k for k in (version_key(v) for v in r.versions.get(pkg, ())) if k is not None]
    if intro and a < (version_key(intro) or a):
        return "before"
    if fixed:
        return "fixed" if a >= (version_key(fixed) or a) else "in_range"
    if last:
        return "after_last" if a > (version_key(last) or a) else "in_range"
    if seen:
        return "in_range" if a <= max(seen) else "newer"
    return None


def version_status(r: Report, asked: Mapping[str, str | None]) -> VersionStatus:
    """Whether report ``r`` applies at the asked package versions (``{"vllm": "0.33.0", …}``)."""
    states = {pkg: s for pkg, v in asked.items() if v and (s := _per_package(r, pkg, v)) is not None}
    seen = seen_text(r)
    fixed = bool(r.fixed_in)
    for pkg, s in states.items():
        if s == "before":
            return VersionStatus(
                "before", f"introduced in {label(pkg)} {r.introduced_in[pkg]}; you have {asked[pkg]}"
            )
        if s == "fixed":
            return VersionStatus("fixed", f"{fix_text(r)}; you have {label(pkg)} {asked[pkg]}")
        if s == "after_last":
            return VersionStatus(
                "after_last_affected",
                f"last affected: {label(pkg)} {r.last_affected[pkg]}; you have {asked[pkg]}",
            )
    still = f", open as of {r.open_as_of}" if r.open_as_of else ""
    if "vllm" in states:  # vLLM's version decides between in range and newer than seen
        states = {"vllm": states["vllm"]}
    if "in_range" in states.values():
        tail = f"; {fix_text(r)}" if fixed else still
        return VersionStatus("in_range", f"seen on {seen}{tail}")
    if "newer" in states.values():
        newer = ", ".join(f"{label(p)} {asked[p]}" for p, s in states.items() if s == "newer")
        if fixed:
            return VersionStatus("maybe_fixed", f"seen up to {seen}; {fix_text(r)}; {newer} is newer")
        return VersionStatus("newer_than_seen", f"seen up to {seen}{still}; not re-checked on {newer}")
    if fixed:
        return VersionStatus("maybe_fixed", f"{fix_text(r)}; seen on {seen}")
    return VersionStatus(
        "unknown", f"{seen}{still}" if seen != "versions unknown" else f"versions unknown{still}"
    )
