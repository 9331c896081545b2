"""Exception lines: the Python forms (``Type: message``, ``Type('message')``), native assertions
(TensorRT / MSVC ``Assertion failed: MSG``, glibc ``Assertion `COND' failed.``) and pytest's summary line,
each read as (type, message)."""

from __future__ import annotations

import re

EXC_TYPE = r"(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure)|Exception)"
EXC = re.compile(rf"^\s*({EXC_TYPE})(?::\s?(.*))?$")
# the repr form vLLM and others log: AssertionError('Only FlashAttention backend is supported for now.')
EXC_REPR = re.compile(rf"^\s*({EXC_TYPE})\((['\"])(.*)\2,?\)\s*$")
# a native (C/C++) assertion is an exception too: TensorRT / MSVC "Assertion failed: MSG (file:line)",
# glibc "prog: file:line: fn: Assertion `COND' failed.", TensorRT "Assertion Error in FN: 0 (MSG)"
_NATIVE_ASSERT = re.compile(
    r"(?:^|[\s:\]])Assertion failed:\s*(?P<a>.+?)\s*(?:\((?:[^()]*[/\\])?[\w.-]+:\d+\))?\s*$"
    r"|\bAssertion [`'](?P<b>.+?)[`'] failed\b"
    r"|\bAssertion Error in [\w:~<>]+: \d+ \((?P<c>.*)\)\s*$"
)
# pytest's short summary: "FAILED tests/x.py::test[p] - RuntimeError: message"
_PYTEST_FAILED = re.compile(r"(?:^|\s)FAILED \S+::\S+ - (?P<rest>\S.*)$")


def exc_parts(exc_m: re.Match[str]) -> tuple[str, str]:
    """(type, message) of a Python exception line."""
    return exc_m.group(1), (exc_m.group(3) if exc_m.re is EXC_REPR else (exc_m.group(2) or ""))


def native_exception(stripped: str) -> tuple[str, str] | None:
    """(type, message) of an exception stated in another form than a Python exception line: a native
    assertion (read as an AssertionError with its message or condition) or a pytest summary line."""
    m = _NATIVE_ASSERT.search(stripped)
    if m is not None:
        return "AssertionError", next(g for g in m.groups() if g is not None)
    f = _PYTEST_FAILED.search(stripped)
    if f is not None:
        exc_m = EXC.match(f.group("rest")) or EXC_REPR.match(f.group("rest"))
        if exc_m is not None:
            return exc_parts(exc_m)
    return None
