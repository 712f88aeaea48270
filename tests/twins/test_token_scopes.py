"""The team console's pre token generation trigger (dispatcher/console/token_scopes.py): only a
member of the group ``operators`` keeps ``longjobs/operate`` in the access token.

The events have the shape of Cognito's version 2 event
(https://docs.aws.amazon.com/cognito/latest/developerguide/user-pool-lambda-pre-token-generation.html):
the user's groups in ``request.groupConfiguration.groupsToOverride``, the scopes asked for in
``request.scopes``, and the answer read from
``response.claimsAndScopeOverrideDetails.accessTokenGeneration.scopesToSuppress``.
"""

from __future__ import annotations

import ast
import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from dispatcher.console import token_scopes
from dispatcher.console.token_scopes import OPERATE_SCOPE, handler

ROOT = Path(__file__).resolve().parents[2]
ASKED = ["openid", "longjobs/read", "longjobs/operate"]  # what the console's client asks for


def event(groups: list[str] | None, *, response: Any = None,
          scopes: list[str] | None = None) -> dict[str, Any]:
    """A V2_0 event from the authorization code flow (the hosted pages' sign-in)."""
    configuration: dict[str, Any] = {"iamRolesToOverride": [], "preferredRole": None}
    if groups is not None:
        configuration["groupsToOverride"] = groups
    return {
        "version": "2",
        "triggerSource": "TokenGeneration_HostedAuth",
        "region": "us-east-1",
        "userPoolId": "us-east-1_EXAMPLE",
        "userName": "3f1c2d4e-aaaa-bbbb-cccc-0123456789ab",
        "callerContext": {"awsSdkVersion": "aws-sdk-unknown-unknown",
                          "clientId": "1example23456789"},
        "request": {"userAttributes": {"sub": "3f1c2d4e-aaaa-bbbb-cccc-0123456789ab",
                                       "email": "alice@example.com"},
                    "groupConfiguration": configuration,
                    "scopes": list(ASKED if scopes is None else scopes)},
        "response": {"claimsAndScopeOverrideDetails": response},
    }


def suppressed(answer: dict[str, Any]) -> list[str]:
    details = answer["response"]["claimsAndScopeOverrideDetails"] or {}
    return list((details.get("accessTokenGeneration") or {}).get("scopesToSuppress") or [])


def issued(answer: dict[str, Any]) -> set[str]:
    """The access token's scopes: those asked for, less those the answer suppresses."""
    return set(answer["request"]["scopes"]) - set(suppressed(answer))


def test_a_user_outside_operators_reads_and_cannot_act() -> None:
    answer = handler(event(["readers"]), None)
    assert suppressed(answer) == [OPERATE_SCOPE]
    assert issued(answer) == {"openid", "longjobs/read"}


def test_an_operator_keeps_every_scope_asked_for() -> None:
    given = event(["readers", "operators"])
    answer = handler(copy.deepcopy(given), None)
    assert answer == given  # nothing added: the token as Cognito would issue it
    assert issued(answer) == set(ASKED)


@pytest.mark.parametrize("groups", [[], None, ["Operators"], ["operators-old"], ["admins"]])
def test_no_group_or_another_group_is_not_operators(groups: list[str] | None) -> None:
    """Group names are compared exactly; a user in no group (the list empty or absent) reads
    only: the trigger keeps operate back rather than hand it out."""
    assert issued(handler(event(groups), None)) == {"openid", "longjobs/read"}


def test_the_trigger_copes_with_a_request_without_group_configuration() -> None:
    given = event([])
    del given["request"]["groupConfiguration"]
    assert suppressed(handler(given, None)) == [OPERATE_SCOPE]


def test_what_the_event_already_suppresses_is_kept_once() -> None:
    """An answer the event already carries (claims, other suppressed scopes) stays, and operate
    is not listed twice."""
    given = event([], response={"idTokenGeneration": {"claimsToSuppress": ["email"]},
                                "accessTokenGeneration": {
                                    "claimsToAddOrOverride": {"team": "batch"},
                                    "scopesToSuppress": ["profile", OPERATE_SCOPE]}})
    details = handler(given, None)["response"]["claimsAndScopeOverrideDetails"]
    assert details == {"idTokenGeneration": {"claimsToSuppress": ["email"]},
                       "accessTokenGeneration": {"claimsToAddOrOverride": {"team": "batch"},
                                                 "scopesToSuppress": ["profile",
                                                                      OPERATE_SCOPE]}}


def test_the_rest_of_the_event_is_returned_as_it_came() -> None:
    given = event(["readers"])
    answer = handler(copy.deepcopy(given), None)
    assert {k: v for k, v in answer.items() if k != "response"} == {
        k: v for k, v in given.items() if k != "response"}


def test_a_refresh_is_answered_as_a_sign_in() -> None:
    """Group changes take effect at the next token: a refresh's event is judged the same way."""
    given = event(["readers"])
    given["triggerSource"] = "TokenGeneration_RefreshTokens"
    assert issued(handler(given, None)) == {"openid", "longjobs/read"}


def test_the_module_imports_the_standard_library_only() -> None:
    """Its function has the base layer alone and must not pay for the console's libraries or
    the project's modules: every import is of the standard library."""
    tree = ast.parse(Path(token_scopes.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {str(node.module).split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported  # the walk saw the imports
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
