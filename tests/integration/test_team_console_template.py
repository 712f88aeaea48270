"""The team console's part of infra/template.yaml (TeamConsole), read as CloudFormation receives
it: after the SAM transform, rendered for given parameter values by test_template_permissions's
evaluator of the intrinsics.

Off by default (nothing of it exists, nothing else refers to it); the HTTP API's routes and their
scopes as the contract with dispatcher/console/lambda_entry.py says; the JWT authorizer with a
Cognito pool of the stack's and with one's own OIDC issuer; the Cognito pool (administrators
create users, the client is public and code flow only, its callback the API's address, the pre
token generation trigger of event version 2 that only this pool may invoke); the function's
handler, layers, environment and role; the stage's access logs and throttling; and checkov over
the template with the console on (with it off, checkov skips the console's resources).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.settings import OnAws
from tests.integration.test_infra import (
    ACCOUNT,
    REGION,
    SAMPLE_PARAMETERS,
    TEMPLATE,
    checkov_binary,
    resolve,
)
from tests.integration.test_template_permissions import Rendering

CONSOLE_CONDITIONS = {"ConsoleOn", "ConsoleOnCognito"}
CONSOLE_PARAMETERS = {"TeamConsole", "ConsoleDomainPrefix", "ConsoleIssuer", "ConsoleAudience",
                      "ConsoleAuthorizeUrl", "ConsoleTokenUrl", "ConsoleClientId",
                      "ConsoleLogoutUrl"}
COGNITO = {"TeamConsole": "cognito", "ConsoleDomainPrefix": "acme-jobs"}
ISSUER = "https://login.example.com/realms/ops"
OIDC = {"TeamConsole": "oidc", "ConsoleIssuer": ISSUER, "ConsoleAudience": "console,ops-api",
        "ConsoleAuthorizeUrl": f"{ISSUER}/protocol/openid-connect/auth",
        "ConsoleTokenUrl": f"{ISSUER}/protocol/openid-connect/token",
        "ConsoleClientId": "longjobs-console"}
# What Lambda allows a function's environment in all (Lambda quotas:
# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_ENV_BYTES = 4096
# An access log format's most (HTTP API quotas:
# https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html).
ACCESS_LOG_TEMPLATE_BYTES = 3 * 1024


def render(expanded: dict[str, Any], node: Any, stack_name: str = "longjobs",
           **values: Any) -> Any:
    """``node`` rendered for these parameter values (those without a default: as `sam deploy
    --guided` would ask for them, test_infra's samples)."""
    return Rendering(expanded, {**SAMPLE_PARAMETERS, **values},
                     stack_name=stack_name).value(copy.deepcopy(node))


def props(expanded: dict[str, Any], name: str, **values: Any) -> dict[str, Any]:
    rendered = render(expanded, expanded["Resources"][name].get("Properties", {}), **values)
    assert isinstance(rendered, dict)
    return rendered


def references(node: Any) -> set[str]:
    """The resources and parameters a node names: Ref, Fn::GetAtt, Fn::Sub's ${...}, and the
    conditions it names through Fn::If and Condition."""
    if isinstance(node, list):
        return set().union(*map(references, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, arg in node.items():
        if key == "Ref" and isinstance(arg, str):
            found.add(arg)
        elif key == "Fn::GetAtt":
            found.add(arg[0] if isinstance(arg, list) else str(arg).split(".")[0])
        elif key == "Fn::Sub":
            text = arg if isinstance(arg, str) else arg[0]
            found |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
            found |= references(arg[1:] if isinstance(arg, list) else [])
        elif key == "Fn::If":
            found.add(str(arg[0]))
            found |= references(arg[1:])
        elif key == "Condition" and isinstance(arg, str):
            found.add(arg)
        else:
            found |= references(arg)
    return found


def console_names(expanded: dict[str, Any]) -> set[str]:
    return {n for n in expanded["Resources"] if n.startswith("Console")}


def created(expanded: dict[str, Any], **values: Any) -> set[str]:
    """The resources CloudFormation creates for these parameter values."""
    rendering = Rendering(expanded, values)
    return {n for n, r in expanded["Resources"].items()
            if "Condition" not in r or rendering.condition(r["Condition"])}


# ------------------------------------------------------------------------------- off by default


def test_the_console_is_off_unless_asked_for(template: dict[str, Any],
                                             expanded: dict[str, Any]) -> None:
    """TeamConsole defaults to off; every resource of the console (the ones the template
    declares and those SAM generates for them: roles, layer versions) carries one of the two
    conditions, both false for the default; the Cognito pool's only with cognito."""
    assert template["Parameters"]["TeamConsole"]["Default"] == "off"
    assert template["Parameters"]["TeamConsole"]["AllowedValues"] == ["off", "cognito", "oidc"]
    names = console_names(expanded)
    assert {"ConsoleFunction", "ConsoleFunctionRole", "ConsoleApi", "ConsoleUserPool",
            "ConsoleTokenScopesFunction", "ConsolePolicy"} <= names
    assert any(n.startswith("ConsoleDependencies") for n in names)  # the layer's version
    resources = expanded["Resources"]
    assert {n: resources[n].get("Condition") for n in names
            if resources[n].get("Condition") not in CONSOLE_CONDITIONS} == {}
    default = Rendering(expanded, {})
    assert not default.condition("ConsoleOn") and not default.condition("ConsoleOnCognito")
    assert created(expanded) & names == set()
    everything = set(resources)
    assert created(expanded, **COGNITO) == everything
    cognito_only = {n for n in names if resources[n]["Condition"] == "ConsoleOnCognito"}
    assert {"ConsoleUserPool", "ConsoleUserPoolDomain", "ConsoleResourceServer",
            "ConsoleUserPoolClient", "ConsoleOperatorsGroup", "ConsoleTokenScopesFunction",
            "ConsoleTokenScopesFunctionRole", "ConsoleTokenScopesPermission"} <= cognito_only
    assert created(expanded, **OIDC) == everything - cognito_only


def test_nothing_else_in_the_stack_depends_on_the_console(expanded: dict[str, Any]) -> None:
    """With the console off the rest is created as before: no other resource or output names a
    console resource, parameter or condition, and no other resource's properties change when it
    is on."""
    names = console_names(expanded)
    console = names | CONSOLE_PARAMETERS | CONSOLE_CONDITIONS
    others = {n: r for n, r in expanded["Resources"].items() if n not in names}
    assert {n: sorted(references(r) & console) for n, r in others.items()
            if references(r) & console} == {}
    outputs = {n: o for n, o in expanded["Outputs"].items()
               if o.get("Condition") not in CONSOLE_CONDITIONS}
    assert {n for n, o in outputs.items() if references(o) & console} == set()
    for values in (COGNITO, OIDC):
        for name in others:
            assert props(expanded, name, **values) == props(expanded, name), name


def test_the_console_outputs_exist_with_it_only(expanded: dict[str, Any]) -> None:
    outputs = expanded["Outputs"]
    assert outputs["ConsoleUrl"]["Condition"] == "ConsoleOn"
    assert outputs["ConsoleUrl"]["Value"] == {"Fn::Sub": "${ConsoleApi.ApiEndpoint}/"}
    assert outputs["ConsoleUserPoolId"]["Condition"] == "ConsoleOnCognito"
    assert outputs["ConsoleUserPoolId"]["Value"] == {"Ref": "ConsoleUserPool"}


def rule_verdicts(template: dict[str, Any], **values: Any) -> dict[str, bool]:
    """Each rule's assertions for these values: True when they hold (or the rule does not
    apply), as CloudFormation checks them before it creates anything."""
    rendering = Rendering(template, values)
    out = {}
    for name, rule in template["Rules"].items():
        applies = rendering.value(rule.get("RuleCondition", True))
        out[name] = not applies or all(rendering.value(a["Assert"]) for a in rule["Assertions"])
    return out


def test_what_each_mode_needs_is_required_before_deploying(template: dict[str, Any]) -> None:
    assert set(rule_verdicts(template).values()) == {True}
    assert set(rule_verdicts(template, **COGNITO).values()) == {True}
    assert set(rule_verdicts(template, **OIDC).values()) == {True}
    assert not rule_verdicts(template, TeamConsole="cognito")["CognitoConsoleNeedsADomainPrefix"]
    for name in ("ConsoleIssuer", "ConsoleAudience", "ConsoleAuthorizeUrl", "ConsoleTokenUrl",
                 "ConsoleClientId"):
        assert not rule_verdicts(template, **{**OIDC, name: ""})["OidcConsoleNeedsItsIssuer"], name
    # The logout URL is optional: an own issuer may have none.
    assert rule_verdicts(template, **OIDC)["OidcConsoleNeedsItsIssuer"]


@pytest.mark.parametrize(("value", "accepted"), [
    ("", True), ("acme-jobs", True), ("a", True), ("0ps", True), ("a" * 63, True),
    ("a" * 64, False), ("Acme", False), ("-acme", False), ("acme-", False), ("ac_me", False),
    ("acme.jobs", False), ("acme jobs", False)])
def test_the_domain_prefix_is_checked_before_deploying(template: dict[str, Any], value: str,
                                                       accepted: bool) -> None:
    pattern = template["Parameters"]["ConsoleDomainPrefix"]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is accepted


def test_the_console_parameters_are_one_group(template: dict[str, Any]) -> None:
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    (group,) = [g for g in groups if "TeamConsole" in g["Parameters"]]
    assert set(group["Parameters"]) == CONSOLE_PARAMETERS


# ------------------------------------------------------------------------------- the routes


def routes(expanded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["Properties"]["RouteKey"]: r["Properties"] for r in expanded["Resources"].values()
            if r["Type"] == "AWS::ApiGatewayV2::Route"}


def test_the_routes_and_their_scopes_are_the_contracts(expanded: dict[str, Any]) -> None:
    """Public: GET / and GET /{proxy+} only (the shell and its static files). Data: GET /x and
    GET /x/{proxy+} with longjobs/read, POST /x/{proxy+} with longjobs/operate, each behind the
    JWT authorizer; every route to the one integration."""
    found = {key: (r["AuthorizationType"], r.get("AuthorizerId"),
                   r.get("AuthorizationScopes")) for key, r in routes(expanded).items()}
    jwt = {"Ref": "ConsoleAuthorizer"}
    assert found == {
        "GET /": ("NONE", None, None),
        "GET /{proxy+}": ("NONE", None, None),
        "GET /x": ("JWT", jwt, ["longjobs/read"]),
        "GET /x/{proxy+}": ("JWT", jwt, ["longjobs/read"]),
        "POST /x/{proxy+}": ("JWT", jwt, ["longjobs/operate"]),
    }
    public = {key for key, r in routes(expanded).items() if r["AuthorizationType"] == "NONE"}
    assert all(key.startswith("GET ") for key in public)
    for r in routes(expanded).values():
        assert r["ApiId"] == {"Ref": "ConsoleApi"}
        assert r["Target"] == {"Fn::Sub": "integrations/${ConsoleIntegration}"}


def test_the_integration_hands_the_function_payload_2(expanded: dict[str, Any]) -> None:
    integration = expanded["Resources"]["ConsoleIntegration"]["Properties"]
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"
    assert integration["IntegrationUri"] == {"Fn::GetAtt": ["ConsoleFunction", "Arn"]}
    (api,) = [r["Properties"] for r in expanded["Resources"].values()
              if r["Type"] == "AWS::ApiGatewayV2::Api"]
    assert api["ProtocolType"] == "HTTP"
    assert "Body" not in api and "Target" not in api  # routes of its own: none but ours


def test_only_this_api_may_invoke_the_function(expanded: dict[str, Any]) -> None:
    permissions = [r["Properties"] for r in expanded["Resources"].values()
                   if r["Type"] == "AWS::Lambda::Permission"
                   and r["Properties"]["FunctionName"] == {"Ref": "ConsoleFunction"}]
    (permission,) = permissions
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert render(expanded, permission["SourceArn"], **COGNITO) == (
        f"arn:aws:execute-api:{REGION}:{ACCOUNT}:${{ConsoleApi}}/*")


# -------------------------------------------------------------------------- the authorizer


def test_the_authorizer_checks_a_cognito_pools_access_tokens(expanded: dict[str, Any]) -> None:
    """The pool's issuer (https://cognito-idp.{region}.amazonaws.com/{userPoolId}) and the
    client's id: Cognito's access tokens carry it as client_id, which API Gateway compares with
    the audience when the token has no aud."""
    authorizer = props(expanded, "ConsoleAuthorizer", **COGNITO)
    assert authorizer["AuthorizerType"] == "JWT"
    assert authorizer["IdentitySource"] == ["$request.header.Authorization"]
    assert authorizer["ApiId"] == {"Ref": "ConsoleApi"}
    assert authorizer["JwtConfiguration"] == {
        "Issuer": f"https://cognito-idp.{REGION}.amazonaws.com/${{ConsoleUserPool}}",
        "Audience": [{"Ref": "ConsoleUserPoolClient"}]}
    raw = expanded["Resources"]["ConsoleAuthorizer"]["Properties"]["JwtConfiguration"]
    assert raw["Issuer"]["Fn::If"][1] == {
        "Fn::Sub": "https://cognito-idp.${AWS::Region}.amazonaws.com/${ConsoleUserPool}"}


def test_the_authorizer_checks_an_own_issuers_access_tokens(expanded: dict[str, Any]) -> None:
    authorizer = props(expanded, "ConsoleAuthorizer", **OIDC)
    assert authorizer["IdentitySource"] == ["$request.header.Authorization"]
    assert authorizer["JwtConfiguration"] == {"Issuer": ISSUER,
                                              "Audience": ["console", "ops-api"]}
    one = props(expanded, "ConsoleAuthorizer", **{**OIDC, "ConsoleAudience": "console"})
    assert one["JwtConfiguration"]["Audience"] == ["console"]
    pattern = expanded["Parameters"]["ConsoleAudience"]["AllowedPattern"]
    assert re.fullmatch(pattern, "console,ops-api")
    assert not re.fullmatch(pattern, "console,") and not re.fullmatch(pattern, "a, b")


# ----------------------------------------------------------------------------- the Cognito pool


def test_only_an_administrator_creates_users(expanded: dict[str, Any]) -> None:
    pool = props(expanded, "ConsoleUserPool", **COGNITO)
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    password = pool["Policies"]["PasswordPolicy"]
    assert password["MinimumLength"] >= 12
    assert all(password[k] for k in ("RequireLowercase", "RequireUppercase", "RequireNumbers",
                                     "RequireSymbols"))
    # Access-token customization (the trigger's version 2) needs Essentials or Plus.
    assert pool["UserPoolTier"] in ("ESSENTIALS", "PLUS")


def test_the_client_is_public_code_flow_only_and_calls_back_the_console(
        expanded: dict[str, Any]) -> None:
    client = props(expanded, "ConsoleUserPoolClient", **COGNITO)
    assert client["UserPoolId"] == {"Ref": "ConsoleUserPool"}
    assert client["GenerateSecret"] is False
    assert client["AllowedOAuthFlowsUserPoolClient"] is True
    assert client["AllowedOAuthFlows"] == ["code"]
    assert client["AllowedOAuthScopes"] == ["openid", "longjobs/read", "longjobs/operate"]
    assert client["SupportedIdentityProviders"] == ["COGNITO"]
    raw = expanded["Resources"]["ConsoleUserPoolClient"]["Properties"]
    console_url = expanded["Outputs"]["ConsoleUrl"]["Value"]
    assert raw["CallbackURLs"] == [console_url] == [{"Fn::Sub": "${ConsoleApi.ApiEndpoint}/"}]
    assert raw["LogoutURLs"] == [console_url]
    # No password reaches any API of the pool from the console: people sign in on its pages.
    assert client["ExplicitAuthFlows"] == ["ALLOW_REFRESH_TOKEN_AUTH"]
    # Its scopes exist before it does: the resource server's identifier and scope names.
    assert expanded["Resources"]["ConsoleUserPoolClient"]["DependsOn"] == "ConsoleResourceServer"
    server = props(expanded, "ConsoleResourceServer", **COGNITO)
    assert {f"{server['Identifier']}/{s['ScopeName']}" for s in server["Scopes"]} == {
        "longjobs/read", "longjobs/operate"}


def test_the_sign_in_pages_are_on_the_prefix_domain(expanded: dict[str, Any]) -> None:
    domain = props(expanded, "ConsoleUserPoolDomain", **COGNITO)
    assert domain == {"UserPoolId": {"Ref": "ConsoleUserPool"}, "Domain": "acme-jobs",
                      "ManagedLoginVersion": 1}
    group = props(expanded, "ConsoleOperatorsGroup", **COGNITO)
    assert group["GroupName"] == "operators" and group["UserPoolId"] == {"Ref": "ConsoleUserPool"}


def test_the_trigger_is_version_2_and_only_this_pool_may_invoke_it(
        expanded: dict[str, Any]) -> None:
    pool = props(expanded, "ConsoleUserPool", **COGNITO)
    assert pool["LambdaConfig"] == {"PreTokenGenerationConfig": {
        "LambdaArn": {"Fn::GetAtt": ["ConsoleTokenScopesFunction", "Arn"]},
        "LambdaVersion": "V2_0"}}
    function = props(expanded, "ConsoleTokenScopesFunction", **COGNITO)
    assert function["Handler"] == "dispatcher.console.token_scopes.handler"
    permissions = [r["Properties"] for r in expanded["Resources"].values()
                   if r["Type"] == "AWS::Lambda::Permission"
                   and r["Properties"]["FunctionName"] == {"Ref": "ConsoleTokenScopesFunction"}]
    (permission,) = permissions
    assert permission["Action"] == "lambda:InvokeFunction"
    assert permission["Principal"] == "cognito-idp.amazonaws.com"
    assert permission["SourceArn"] == {"Fn::GetAtt": ["ConsoleUserPool", "Arn"]}
    assert permission["SourceAccount"] == {"Ref": "AWS::AccountId"}


def test_the_trigger_has_the_base_layer_and_the_logging_grants_only(
        expanded: dict[str, Any]) -> None:
    function = expanded["Resources"]["ConsoleTokenScopesFunction"]["Properties"]
    (layer,) = function["Layers"]
    assert layer["Ref"].startswith("LambdaDependencies")
    role = expanded["Resources"]["ConsoleTokenScopesFunctionRole"]["Properties"]
    assert role["ManagedPolicyArns"] == [
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]
    assert "Policies" not in role


# -------------------------------------------------------------------------------- the function


def test_the_function_serves_the_console_with_both_layers(expanded: dict[str, Any]) -> None:
    function = expanded["Resources"]["ConsoleFunction"]["Properties"]
    assert function["Handler"] == "dispatcher.console.lambda_entry.handler"
    assert function["Runtime"] == "python3.12" and function["Architectures"] == ["x86_64"]
    base, console = (layer["Ref"] for layer in function["Layers"])
    assert base.startswith("LambdaDependencies") and console.startswith("ConsoleDependencies")
    layers = expanded["Resources"]
    assert layers[console]["Type"] == layers[base]["Type"] == "AWS::Lambda::LayerVersion"
    assert 0 < function["Timeout"] <= 30  # API Gateway waits 30 s at most
    assert function["LoggingConfig"] == {"LogGroup": {"Ref": "ConsoleLogGroup"}}


def console_env(expanded: dict[str, Any], **values: Any) -> dict[str, Any]:
    env = props(expanded, "ConsoleFunction", **values)["Environment"]["Variables"]
    assert isinstance(env, dict)
    return env


def test_the_function_signs_in_with_the_cognito_pool(expanded: dict[str, Any]) -> None:
    env = console_env(expanded, **COGNITO)
    hosted = f"https://{{'Ref': 'ConsoleUserPoolDomain'}}.auth.{REGION}.amazoncognito.com"
    assert {k: env[k] for k in env if k.startswith("LONGJOBS_CONSOLE_")} == {
        "LONGJOBS_CONSOLE_CLIENT_ID": {"Ref": "ConsoleUserPoolClient"},
        "LONGJOBS_CONSOLE_AUTHORIZE_URL": f"{hosted}/oauth2/authorize",
        "LONGJOBS_CONSOLE_TOKEN_URL": f"{hosted}/oauth2/token",
        "LONGJOBS_CONSOLE_LOGOUT_URL": f"{hosted}/logout",
        "LONGJOBS_CONSOLE_OPERATE": "true"}


def test_the_function_signs_in_with_an_own_issuer(expanded: dict[str, Any]) -> None:
    env = console_env(expanded, **OIDC)
    assert {k: env[k] for k in env if k.startswith("LONGJOBS_CONSOLE_")} == {
        "LONGJOBS_CONSOLE_CLIENT_ID": "longjobs-console",
        "LONGJOBS_CONSOLE_AUTHORIZE_URL": OIDC["ConsoleAuthorizeUrl"],
        "LONGJOBS_CONSOLE_TOKEN_URL": OIDC["ConsoleTokenUrl"],
        "LONGJOBS_CONSOLE_LOGOUT_URL": "",
        "LONGJOBS_CONSOLE_OPERATE": "true"}
    logout = f"{ISSUER}/protocol/openid-connect/logout"
    env = console_env(expanded, **OIDC, ConsoleLogoutUrl=logout)
    assert env["LONGJOBS_CONSOLE_LOGOUT_URL"] == logout


def test_the_function_gets_what_the_operator_reads_need(expanded: dict[str, Any]) -> None:
    """Every setting the client's role reads that the stack sets (its queues, table, dead-letter
    queue, alarms' prefix, retention, kinds), the job logs' (cluster, task family, container),
    none of the schedules' (the console keeps none); the values the stack's outputs give the
    CLI; and the settings load from it."""
    env = expanded["Resources"]["ConsoleFunction"]["Properties"]["Environment"]["Variables"]
    schedules = {"LONGJOBS_SCHEDULE_GROUP", "LONGJOBS_SCHEDULER_ROLE_ARN",
                 "LONGJOBS_SCHEDULE_DLQ_ARN"}
    client = {s.name for s in settings.SETTINGS if "client" in s.roles
              and s.on_aws in (OnAws.STACK, OnAws.PARAMETER)}
    assert client - schedules <= set(env)
    assert not schedules & set(env)
    assert {"LONGJOBS_CLUSTER", "LONGJOBS_TASK_FAMILY", "LONGJOBS_CONTAINER"} <= set(env)
    outputs = expanded["Outputs"]
    assert env["LONGJOBS_DLQ_URL"] == outputs["DeadLetterQueueUrl"]["Value"]
    assert (render(expanded, env["LONGJOBS_ALARM_PREFIX"])
            == render(expanded, outputs["AlarmNamePrefix"]["Value"]) == "longjobs-longjobs-")
    assert (render(expanded, env["LONGJOBS_ALARM_PREFIX"], stack_name="prod")
            == "prod-longjobs-")
    sample = {k: str(resolve(v, expanded)) for k, v in env.items()}
    cfg = settings.load("client", sample)
    assert cfg.dlq_url.endswith("/longjobs-JobDeadLetterQueue")
    assert cfg.table == "longjobs-JobTable"


@pytest.mark.parametrize("values", [COGNITO, OIDC], ids=["cognito", "oidc"])
def test_the_functions_environment_fits_lambdas_limit(expanded: dict[str, Any],
                                                      values: dict[str, str]) -> None:
    """Rendered as test_stack_settings renders the other functions' (test_infra's sample
    physical ids), with a 128-character stack name and issuer URLs of 250 characters."""
    long = {**values, **{k: v + "/" + "x" * (249 - len(v)) for k, v in values.items()
                         if v.startswith("https://")}}
    env = render(expanded, expanded["Resources"]["ConsoleFunction"]["Properties"]["Environment"][
        "Variables"], stack_name="s" * 128, **long)
    sample = {k: str(resolve(v, expanded)) for k, v in env.items()}
    assert len(sample["LONGJOBS_ALARM_PREFIX"]) > 128
    size = len(json.dumps(sample, separators=(",", ":")))
    assert size < LAMBDA_ENV_BYTES, size


def test_the_functions_role_attaches_the_console_policy_alone(expanded: dict[str, Any]) -> None:
    """The logging grants every function has and ConsolePolicy; no inline policy, no other
    policy attached anywhere in the template, and ConsolePolicy is OperatorPolicy's statements
    for reads, cancels and retries and redrives, none of its schedule grants."""
    role = expanded["Resources"]["ConsoleFunctionRole"]["Properties"]
    assert role["ManagedPolicyArns"] == [
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        {"Ref": "ConsolePolicy"}]
    assert "Policies" not in role and "PermissionsBoundary" not in role
    attached = [n for n, r in expanded["Resources"].items()
                if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                and {"Ref": "ConsoleFunctionRole"} in r["Properties"].get("Roles", [])]
    assert attached == []
    assert expanded["Resources"]["ConsoleFunction"]["Properties"]["Role"] == {
        "Fn::GetAtt": ["ConsoleFunctionRole", "Arn"]}
    console = {s["Sid"]: s for s in expanded["Resources"]["ConsolePolicy"]["Properties"][
        "PolicyDocument"]["Statement"]}
    operator = {s["Sid"]: s for s in expanded["Resources"]["OperatorPolicy"]["Properties"][
        "PolicyDocument"]["Statement"]}
    assert sorted(console) == sorted(["ReadJobs", "QueryJobs", "CancelAndRetryJobs",
                                      "QueueBacklogs", "TakeDeadLetters", "RedriveToJobQueues",
                                      "FindJobLogs", "ReadJobLogs", "ReadAlarms"])
    assert console == {sid: operator[sid] for sid in console}
    actions = {a for s in console.values()
               for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert not {a for a in actions if a.startswith(("scheduler:", "iam:"))}
    assert not {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions


# ------------------------------------------------------------------------------- the stage


def test_the_stage_logs_every_request_and_throttles(expanded: dict[str, Any]) -> None:
    stage = props(expanded, "ConsoleStage", **COGNITO)
    assert stage["ApiId"] == {"Ref": "ConsoleApi"}
    assert stage["StageName"] == "$default" and stage["AutoDeploy"] is True
    logs = stage["AccessLogSettings"]
    assert logs["DestinationArn"] == {"Fn::GetAtt": ["ConsoleAccessLogGroup", "Arn"]}
    assert props(expanded, "ConsoleAccessLogGroup")["RetentionInDays"] == 30  # LogRetentionDays
    assert expanded["Resources"]["ConsoleAccessLogGroup"]["Properties"]["RetentionInDays"] == {
        "Ref": "LogRetentionDays"}
    line = json.loads(logs["Format"])  # one JSON object a request
    assert line["requestId"] == "$context.requestId"  # the one variable AWS requires
    assert {"$context.routeKey", "$context.status", "$context.authorizer.error",
            "$context.identity.sourceIp"} <= set(line.values())
    assert len(logs["Format"].encode()) <= ACCESS_LOG_TEMPLATE_BYTES
    throttle = stage["DefaultRouteSettings"]
    assert 0 < throttle["ThrottlingRateLimit"] <= 100
    assert throttle["ThrottlingRateLimit"] <= throttle["ThrottlingBurstLimit"] <= 200


# ------------------------------------------------------------------------------- checkov, on


@pytest.mark.parametrize("mode", ["cognito", "oidc"])
def test_checkov_reports_nothing_with_the_console_on(tmp_path: Path, mode: str) -> None:
    """checkov leaves out the resources whose condition is false for the parameters' defaults,
    so test_infra's run over the template never sees the console's: here it runs over a copy
    whose TeamConsole defaults to the mode, and must have checked them."""
    checkov = checkov_binary()
    if checkov is None:
        pytest.skip("checkov not installed (see test_infra.test_checkov_reports_no_failed_checks)")
    text = TEMPLATE.read_text()
    on = text.replace('    Default: "off"\n    AllowedValues: ["off", cognito, oidc]',
                      f'    Default: {mode}\n    AllowedValues: ["off", cognito, oidc]')
    assert on != text
    copy_of = tmp_path / "template.yaml"
    copy_of.write_text(on)
    # --skip-download: offline, as test_infra's run; not --quiet: the passed and skipped checks
    # too, to see which resources were checked.
    proc = subprocess.run(
        [str(checkov), "--file", str(copy_of), "--framework", "cloudformation",
         "--skip-download", "--output", "json"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "BC_API_KEY": ""})
    report = json.loads(proc.stdout)
    results = report["results"]
    failed = [f"{c['check_id']} {c['resource']}" for c in results["failed_checks"]]
    assert report["summary"]["parsing_errors"] == 0
    assert failed == []
    checked = {c["resource"].split(".")[-1] for kind in ("passed_checks", "skipped_checks")
               for c in results[kind]}
    assert {"ConsoleFunction", "ConsolePolicy", "ConsoleStage"} <= checked
    assert ("ConsoleTokenScopesFunction" in checked) is (mode == "cognito")
