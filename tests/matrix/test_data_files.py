"""The data files the fast recommend path reads without pydantic are validated here with pydantic."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from pydantic import ValidationError

from probe.catalog.report_schema import ReportsFile
from probe.recommend.data_models import FlagsData, validate_packaged_data


def test_packaged_files_validate():
    flags, reported = validate_packaged_data()
    assert {"marlin", "cutlass", "flashinfer_cutlass", "triton"} <= flags.moe_backends.keys()
    assert "nvfp4" not in flags.moe_backends["triton"].quants  # rejected for NVFP4 (field report + oracle)
    assert {110, 120, 121} <= {sm for r in reported.reports for sm in r.gpus}


def _raw(name):
    return json.loads(resources.files("probe.data").joinpath(name).read_text())


def test_bad_flags_data_is_rejected():
    bad = copy.deepcopy(_raw("vllm_flags.json"))
    bad["moe_backends"]["marlin"]["since"] = "soon"
    with pytest.raises(ValidationError):
        FlagsData.model_validate(bad)


def test_reports_need_a_source_or_a_citation():
    bad = copy.deepcopy(_raw("reports.json"))
    bad["reports"][0]["source"] = None
    bad["reports"][0].pop("citation", None)
    with pytest.raises(ValidationError, match="needs a 'citation'"):
        ReportsFile.model_validate(bad)
