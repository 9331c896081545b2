"""``probe merge``: several matrices (GPUs / images) into one fleet document, one column each."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from probe import __version__
from probe.errors import UsageError
from probe.matrix.schema import Fleet, Matrix


def merge(docs: list[Any]) -> Fleet:
    """Flatten matrices and fleets into one fleet; column labels are made unique (``#2`` …)."""
    members: list[Matrix] = []
    for d in docs:
        members.extend(d.matrices if isinstance(d, Fleet) else [d])
    if not members:
        raise UsageError("nothing to merge")
    labels: list[str] = []
    for m in members:
        base = m.column_label()
        label, n = base, 2
        while label in labels:
            label, n = f"{base} #{n}", n + 1
        labels.append(label)
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return Fleet(created_at=now, probe_version=__version__, columns=labels, matrices=members)
