"""The template's status index projects exactly what the code's index holds (the twin and the
pynamodb model project INDEX_ATTRIBUTES): an attribute a reader filters on or shows that the
template left out would read as missing on AWS only."""

from __future__ import annotations

from typing import Any

from samtranslator.yaml_helper import yaml_parse

from dispatcher.aws.dynamodb.model import STATUS_INDEX
from dispatcher.ports.record import INDEX_ATTRIBUTES
from tests.integration.test_infra import TEMPLATE, resources


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
