"""The team console's Cognito pre token generation trigger (infra/template.yaml,
``ConsoleTokenScopesFunction``): only the group ``operators`` may act.

The console's client asks for ``longjobs/read`` and ``longjobs/operate``; the HTTP API gives the
read routes to a token with ``longjobs/read`` and the actions to one with ``longjobs/operate``.
For a user who is not in ``operators``, this trigger takes ``longjobs/operate`` out of the access
token, so that user reads and cannot act. A user added to or removed from the group gets the
other answer at their next token (a sign-in or a refresh).

The event is the trigger's version 2 (``LambdaVersion: V2_0``, which access-token customization
needs): the user's groups in ``request.groupConfiguration.groupsToOverride``, the answer in
``response.claimsAndScopeOverrideDetails.accessTokenGeneration.scopesToSuppress``
(https://docs.aws.amazon.com/cognito/latest/developerguide/user-pool-lambda-pre-token-generation.html).
The function holds the dispatcher package with the base layer and imports nothing but this
module: the standard library alone, no AWS call, so a sign-in waits for no more than this.
"""

from __future__ import annotations

from typing import Any

OPERATORS_GROUP = "operators"
OPERATE_SCOPE = "longjobs/operate"


def groups_of(event: dict[str, Any]) -> list[str]:
    """The user's groups as the event names them (none: an empty or missing list)."""
    request = event.get("request") or {}
    configuration = request.get("groupConfiguration") or {}
    return [str(g) for g in configuration.get("groupsToOverride") or []]


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    """Cognito's event, returned with ``longjobs/operate`` suppressed from the access token of a
    user outside ``operators``; an operator's token is left as Cognito would issue it. Whatever
    the event already asks to suppress is kept."""
    if OPERATORS_GROUP in groups_of(event):
        return event
    response = event.get("response") or {}
    details = response.get("claimsAndScopeOverrideDetails") or {}
    access = details.get("accessTokenGeneration") or {}
    suppressed = [str(s) for s in access.get("scopesToSuppress") or []]
    if OPERATE_SCOPE not in suppressed:
        suppressed.append(OPERATE_SCOPE)
    access["scopesToSuppress"] = suppressed
    details["accessTokenGeneration"] = access
    response["claimsAndScopeOverrideDetails"] = details
    event["response"] = response
    return event
