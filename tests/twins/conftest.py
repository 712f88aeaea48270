"""The twin tier runs without moto: asking for its server here is a test in the wrong tier."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def moto_server() -> None:
    pytest.fail("tests/twins runs on the in-memory twins: a test that needs moto's server "
                "belongs in tests/contract (an adapter's behaviour) or tests/integration")
