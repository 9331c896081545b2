"""Shared loader: read a packaged JSON data file and validate it with a pydantic model."""

from __future__ import annotations

import json
from importlib import resources
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from probe.errors import DataFileError

M = TypeVar("M", bound=BaseModel)


def load_data_file(name: str, model: type[M]) -> M:
    """Load ``probe/data/<name>`` and validate it; a bad file is a bug in probe (DataFileError)."""
    try:
        text = resources.files("probe.data").joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise DataFileError(f"packaged data file probe/data/{name} is missing: {exc}") from exc
    try:
        return model.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise DataFileError(f"packaged data file probe/data/{name} is invalid: {exc}") from exc
