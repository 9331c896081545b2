"""``probe report import URL|FILE``: an issue thread's text turned into a draft report for a person to
confirm.

From the title, the body, a pasted ``collect-env`` block and logs: the GPUs (catalog names, ``sm_120``,
"compute capability 12.0"), the versions (vLLM, torch, CUDA, FlashInfer, the driver), the backend vLLM
said it used ("Using FLASH_ATTN attention backend", "Using 'MARLIN' WNA16 MoE backend", an experts
class), and the outcome with its decisive line as ``probe classify`` reads the text. A GitHub issue URL is
read through GitHub's API (title, body, comments); any other URL as its text. The draft carries what it
could not tell as empty fields and says so in ``checked``: it is never added to a base unconfirmed.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from probe.decide.thread_facts import Thread, backend_in, gpus_in, kind_in, split_thread, versions_in
from probe.errors import BadInputError, InfraError

MAX_TEXT = 8 << 20  # what a thread may hold (a longer page is cut)
_GITHUB = re.compile(r"^https://github\.com/([^/\s]+)/([^/\s]+)/(?:issues|pull)/(\d+)")
_DATE = re.compile(r"\b(20[12]\d-[01]\d-[0-3]\d)\b")
#: a title's words for a failure no pasted line names (a hang is seldom logged: the log just stops)
_TITLE_OUTCOMES = (
    ("timeout", re.compile(
        r"\bhang(?:s|ing)?\b|\bhung\b|stuck|deadlock|freez|never (?:finish|return)", re.I)),
    ("wrong_output", re.compile(
        r"garbage|gibberish|all zeros|wrong (?:output|result|answer)|\bNaN", re.I)),
    ("unsupported", re.compile(
        r"can(?:no|')t use|not (?:yet )?support|unsupported|only supported|does(?: not|n't) work with",
        re.I)),
    ("crashed", re.compile(r"segfault|segmentation fault|core dumped|\bcrash|\bSIGSEGV|\babort", re.I)),
)  # fmt: skip


@dataclass
class Draft:
    """A draft report and what the reader could not tell (said in ``checked``)."""

    entry: dict[str, Any]
    missing: list[str] = field(default_factory=list)


def _classified(text: str) -> dict[str, Any]:
    import io

    from probe.sandbox.classifier import LogScanner

    sc = LogScanner()
    sc.feed_stream(io.BytesIO(text.encode("utf-8", "replace")))
    return sc.verdict().as_dict()


def _stated_line(text: str) -> tuple[str, str] | None:
    """(outcome, line) of the first line a signature reads as a failure, else of the first line the cause
    words read as one, whatever its log level: a thread pastes the line it is about, often an INFO or a
    bare message (a known signature anywhere beats generic words on an earlier line)."""
    from probe.catalog.signatures import signature_db
    from probe.sandbox.logtext import LineMatcher, clean_line, strip_prefixes

    match = LineMatcher(signature_db())
    bodies = [
        b for b in (strip_prefixes(clean_line(raw)).strip() for raw in text.splitlines()) if len(b) >= 8
    ]
    for body in bodies:
        sig = match.best(body)
        if sig is not None and sig.outcome not in (None, "ok", "skipped") and sig.fails:
            return str(sig.outcome.value), body
    for body in bodies:
        cause = match.cause_words(body, lambda: True)
        if cause is not None:
            return str(cause.outcome.value), body
    return None


def _line_saying(outcome: str, description: str) -> str | None:
    """The description's first line in the title's words for ``outcome``."""
    rx = dict(_TITLE_OUTCOMES).get(outcome)
    return (
        None if rx is None else next((ln.strip() for ln in description.splitlines() if rx.search(ln)), None)
    )


def _title_words(title: str) -> tuple[str, str | None] | None:
    """(outcome, None) the title's words name."""
    return next(((outcome, None) for outcome, rx in _TITLE_OUTCOMES if rx.search(title)), None)


def outcome_of(thread: Thread) -> tuple[str, str | None]:
    """(outcome, decisive line): the classifier on the pasted logs; where it finds no failure, what the
    title states, with the description's line that says the same (the title itself when none does);
    else the description's first failing line; ``ok`` only when nothing says anything failed."""
    verdict = _classified(f"{thread.description}\n{thread.comments}")  # the pasted logs, not the title
    if verdict["outcome"] != "ok":
        return verdict["outcome"], verdict.get("root_cause")
    stated = _stated_line(thread.description)
    title = _stated_line(thread.title) or _title_words(thread.title)
    if title is None:
        return stated or ("ok", None)
    if stated is not None and stated[0] == title[0]:
        return stated
    return title[0], _line_saying(title[0], thread.description) or title[1]


_STACKS = {"vllm-project": "vllm", "sgl-project": "sglang", "flashinfer-ai": "flashinfer",
           "NVIDIA/TensorRT-LLM": "tensorrt_llm", "Dao-AILab": "flash_attn",
           "deepseek-ai/DeepGEMM": "deep_gemm", "deepseek-ai/FlashMLA": "flashmla",
           "NVIDIA/cutlass": "cutlass"}  # fmt: skip


def _stack(source: str | None, versions: dict[str, str]) -> str:
    """The software stack of the thread: its repository, else the serving stack whose version it states."""
    for where, stack in _STACKS.items():
        if source and f"github.com/{where}" in source:
            return stack
    return next((p for p in ("vllm", "sglang", "tensorrt_llm") if p in versions), "other")


def _exact_versions(found: dict[str, str]) -> tuple[dict[str, list[str]], str | None]:
    from probe.reports import vocab

    exact: dict[str, list[str]] = {}
    notes = []
    for pkg, text in found.items():
        v, note = vocab.split_version(pkg, text)
        if v:
            exact[pkg] = [v]
        elif note:
            notes.append(note)
    return exact, "; ".join(notes) or None


def draft_from_text(text: str, source: str | None, title: str | None = None) -> Draft:
    """The draft report of one thread's text (see the module docstring): the packaged base's format,
    with the fields the text did not give left out and named in ``missing``."""
    thread = split_thread(text[:MAX_TEXT], title)
    own = f"{thread.title}\n{thread.description}"
    gpus, found = gpus_in(thread), versions_in(own) or versions_in(thread.comments)
    versions, versions_text = _exact_versions(found)
    backend_kind, backend, fa = backend_in(text)
    outcome, line = outcome_of(thread)
    kind = kind_in(thread, line, backend_kind, outcome != "ok")
    date = _DATE.search(text)
    entry: dict[str, Any] = {
        "id": _draft_id(source, gpus, backend),
        "source": source,
        "date": date.group(1) if date else dt.date.today().isoformat(),
        "seen_in": _stack(source, found),
        "gpus": gpus,
        "kind": kind,
        "backend": _backend_name(kind, backend),
        "fa_version": fa,
        "versions": versions,
        "versions_text": versions_text,
        "outcome": outcome,
        "symptom": thread.title[:300],
        "root_cause": "not established (draft: confirm from the thread)",
        "log_line": " ".join(line.split())[:300] if line else None,
        "open_as_of": dt.date.today().isoformat() if outcome != "ok" else None,
    }
    missing = [
        what for what, have in (("gpus", gpus), ("versions", versions), ("backend", backend)) if not have
    ]
    entry["checked"] = "draft by probe report import; confirm every field against the thread" + (
        f"; not in the text: {', '.join(missing)}" if missing else ""
    )
    return Draft({k: v for k, v in entry.items() if v not in (None, {}, [])}, missing)


def draft_problems(entry: dict[str, Any]) -> list[str]:
    """What keeps a draft from being a valid report entry (empty: it validates as it stands)."""
    from pydantic import ValidationError

    from probe.reports.report_schema import ReportModel

    try:
        ReportModel.model_validate(entry)
    except ValidationError as exc:
        return [str(err.get("msg")) for err in exc.errors()]
    except ValueError as exc:
        return [str(exc)]
    return []


def _backend_name(kind: str, backend: str | None) -> str:
    from probe.reports import vocab

    if backend is None:
        return "unknown"
    return vocab.normal_backend(kind, backend)[1] if kind in vocab.KINDS else backend


def _draft_id(source: str | None, gpus: list[int], backend: str | None) -> str:
    m = _GITHUB.match(source or "")
    where = f"{m.group(2)}-{m.group(3)}" if m else "draft"
    gpu = f"sm{gpus[0]}" if gpus else "gpu"
    return re.sub(r"[^a-z0-9_.-]+", "-", f"{where}-{gpu}-{backend or 'backend'}".lower())


def _get(url: str, accept: str = "application/vnd.github+json") -> str:
    import urllib.request

    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "probe-report-import"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read(MAX_TEXT).decode("utf-8", "replace")
    except OSError as exc:
        raise InfraError(f"cannot read {url}: {exc}") from exc


def thread_text(url: str) -> tuple[str, str | None]:
    """(text, title) of a thread: a GitHub issue or pull request through the API, else the page."""
    if not url.startswith("https://"):
        raise BadInputError(f"{url}: only https:// addresses are read")
    m = _GITHUB.match(url)
    if m is None:
        page = _get(url, "text/html, text/plain")
        return re.sub(r"<[^>]+>", " ", page), None
    api = f"https://api.github.com/repos/{m.group(1)}/{m.group(2)}/issues/{m.group(3)}"
    issue = json.loads(_get(api))
    comments = json.loads(_get(api + "/comments?per_page=100"))
    return thread_layout(issue, comments if isinstance(comments, list) else []), issue.get("title")


def _when(item: dict[str, Any]) -> str:
    return str(item.get("created_at") or "")[:10] or "0000-00-00"


def thread_layout(issue: dict[str, Any], comments: list[dict[str, Any]]) -> str:
    """An issue and its comments (GitHub API objects) in the layout ``split_thread`` reads."""
    user = (issue.get("user") or {}).get("login", "someone")
    parts = [
        f"# {issue.get('title') or ''}",
        f"{user} · description · {_when(issue)}",
        issue.get("body") or "",
    ]
    for c in comments:
        if isinstance(c, dict):
            who = (c.get("user") or {}).get("login", "someone")
            parts += [f"{who} · comment · {_when(c)}", c.get("body") or ""]
    return "\n".join(parts)
