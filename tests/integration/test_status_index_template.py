"""The template's status index projects exactly what the code's index holds (the twin and the
pynamodb model project INDEX_ATTRIBUTES): an attribute a reader filters on or shows that the
template left out would read as missing on AWS only."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from dispatcher.aws.dynamodb.model import STATUS_INDEX
from dispatcher.ports.record import INDEX_ATTRIBUTES
from tests.integration.test_infra import TEMPLATE, resources

ROOT = Path(__file__).resolve().parents[2]


def _indexes() -> dict[str, dict[str, Any]]:
    template = yaml_parse(TEMPLATE.read_text())
    (table,) = resources(template, "AWS::DynamoDB::Table").values()
    return {i["IndexName"]: i for i in table["Properties"]["GlobalSecondaryIndexes"]}


def test_the_status_index_projects_the_attributes_its_readers_read() -> None:
    projection = _indexes()[STATUS_INDEX]["Projection"]
    assert projection["ProjectionType"] == "INCLUDE"
    assert sorted(projection["NonKeyAttributes"]) == sorted(INDEX_ATTRIBUTES)
    # The large attributes stay out: a payload or a history is not rewritten into the index.
    assert not {"payload", "history", "result", "checkpoint"} & set(INDEX_ATTRIBUTES)


# docs/deploying.md, "Upgrading a stack from before the sharded status index": the releases an
# older stack takes in order, each a single change of the table (DynamoDB adds or deletes one
# index per update; a stream turned on beside an index change is nowhere documented).
UPGRADE_PATH = ["4fefd88~1", "f8f3c86", "a8a598b", "HEAD"]


def _table_at(commit: str) -> dict[str, Any]:
    text = subprocess.run(["git", "show", f"{commit}:infra/template.yaml"], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=60).stdout
    (table,) = resources(yaml_parse(text), "AWS::DynamoDB::Table").values()
    props: dict[str, Any] = table["Properties"]
    return props


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    old = {i["IndexName"] for i in before.get("GlobalSecondaryIndexes", [])}
    new = {i["IndexName"] for i in after.get("GlobalSecondaryIndexes", [])}
    changes = [f"add {n}" for n in sorted(new - old)] + [f"delete {n}" for n in sorted(old - new)]
    if before.get("StreamSpecification") != after.get("StreamSpecification"):
        changes.append(f"stream {after.get('StreamSpecification')}")
    return changes


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the project's git history")
def test_each_release_of_the_documented_upgrade_changes_the_table_once() -> None:
    guide = (ROOT / "docs" / "deploying.md").read_text()
    assert all(c.split("~")[0] in guide for c in UPGRADE_PATH[1:-1])
    tables = [_table_at(c) for c in UPGRADE_PATH]
    steps = [_changes(a, b) for a, b in itertools.pairwise(tables)]
    assert steps == [["add by_status_shard"],
                     ["stream {'StreamViewType': 'NEW_AND_OLD_IMAGES'}"],
                     ["delete by_status"]]
