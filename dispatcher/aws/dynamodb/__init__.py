"""The DynamoDB adapter of the table port (:mod:`.dynamo_table`) and its pynamodb model
(:mod:`.model`). The Store over it is the composition root's to build
(:func:`dispatcher.wiring.adapters.open_store`): an adapter knows its port, not the policy
above it."""

from __future__ import annotations

from dispatcher.aws.dynamodb.dynamo_table import DynamoTable

__all__ = ["DynamoTable"]
