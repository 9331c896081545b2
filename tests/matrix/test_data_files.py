"""The field-report base, read without pydantic by the fast recommend path, validated here with pydantic."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from pydantic import ValidationError

from probe.reports.report_schema import ReportsFile


def test_packaged_reports_validate():
    reported = ReportsFile.model_validate(_raw("reports.json"))
    assert {110, 120, 121} <= {sm for r in reported.reports for sm in r.gpus}


def _raw(name):
    return json.loads(resources.files("probe.data").joinpath(name).read_text())


def test_reports_need_a_source_or_a_citation():
    bad = copy.deepcopy(_raw("reports.json"))
    bad["reports"][0]["source"] = None
    bad["reports"][0].pop("citation", None)
    with pytest.raises(ValidationError, match="needs a 'citation'"):
        ReportsFile.model_validate(bad)
