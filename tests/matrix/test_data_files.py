"""The data files the fast recommend path reads without pydantic are validated here with pydantic."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from pydantic import ValidationError

from probe.recommend.data_models import FlagsData, ReportedData, validate_packaged_data


def test_packaged_files_validate():
    flags, reported = validate_packaged_data()
    assert {"marlin", "cutlass", "flashinfer_cutlass", "triton"} <= flags.moe_backends.keys()
    assert "nvfp4" not in flags.moe_backends["triton"].quants  # rejected for NVFP4 (field report + oracle)
    assert {c.gpu_sm for c in reported.cells} == {110, 120, 121}


def _raw(name):
    return json.loads(resources.files("probe.data").joinpath(name).read_text())


def test_bad_flags_data_is_rejected():
    bad = copy.deepcopy(_raw("vllm_flags.json"))
    bad["moe_backends"]["marlin"]["since"] = "soon"
    with pytest.raises(ValidationError):
        FlagsData.model_validate(bad)


def test_reported_cells_need_citations():
    bad = copy.deepcopy(_raw("reported.json"))
    bad["reports"][0]["cell"]["citation"] = None
    with pytest.raises(ValidationError):
        ReportedData.model_validate(bad)
