"""The template's fixtures, for the tests that read it: as written (``template``) and after the
SAM transform, offline (``expanded``). Each module gets its own copy, as a test may change
what it reads."""

from __future__ import annotations

from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.integration.test_infra import TEMPLATE, sam_expand


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return parsed


@pytest.fixture(scope="module")
def expanded(template: dict[str, Any]) -> dict[str, Any]:
    return sam_expand(template)
