"""The CLI runner and the matrix test data, shared with tests/matrix."""

from __future__ import annotations

from tests.matrix.conftest import data_dir as data_dir
from tests.matrix.conftest import probe_cli as probe_cli
