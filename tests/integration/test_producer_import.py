"""Producers import the client from the package (``from dispatcher import JobClient``), the old
path keeps working, and importing the package alone loads nothing of ours: the Lambda handlers and
the job runner import ``dispatcher.*`` too and must not pay for the producer client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import modules_loaded_after

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_is_importable_from_the_package() -> None:
    from dispatcher import JobClient
    from dispatcher.ops.client import JobClient as at_its_module

    assert JobClient is at_its_module


def test_importing_the_package_loads_no_module_of_ours_nor_a_dependency() -> None:
    loaded = modules_loaded_after("import dispatcher", ROOT)
    assert "dispatcher" in loaded
    ours = sorted(m for m in loaded if m.startswith(("dispatcher.", "job_runner")))
    dependencies = sorted(m for m in loaded
                          if m.split(".")[0] in ("pydantic", "boto3", "botocore", "pynamodb"))
    assert ours == [] and dependencies == []


def test_the_client_loads_on_first_use() -> None:
    loaded = modules_loaded_after("from dispatcher import JobClient", ROOT)
    assert "dispatcher.ops.client" in loaded


def test_another_name_is_still_missing() -> None:
    import dispatcher

    with pytest.raises(AttributeError, match="no attribute 'Client'"):
        dispatcher.Client  # noqa: B018
    assert "JobClient" in dir(dispatcher)
