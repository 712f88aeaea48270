"""Every setting an operator may change is a stack parameter, and reaches, unchanged, each
deployed process that reads it; the template sets no variable the settings do not declare.

``dispatcher/settings.py`` says who sets each setting on AWS (``Env.on_aws``) and which roles read
it (``Env.roles``). The deployed processes are the two functions (role dispatcher: the tick and
the task-event handler each wire the whole pipeline) and the worker container (role runner).
The roles are checked against the code each process runs; the template is read as
CloudFormation receives it, after the SAM transform (``Globals`` merged into each function), and
rendered with parameter values of the tests' own.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from samtranslator.yaml_helper import yaml_parse

from dispatcher import settings
from dispatcher.domain.errors import ConfigError
from dispatcher.settings import Config, Env, OnAws
from tests.integration.test_infra import (
    ROOT,
    SAMPLE_PARAMETERS,
    TEMPLATE,
    resolve,
    sam_expand,
)

# The deployed processes and the role each reads its settings as.
PROCESSES = {"DispatcherFunction": "dispatcher", "TaskEventFunction": "dispatcher",
             "JobEventsFunction": "events", "DependentsFunction": "dispatcher",
             "worker": "runner",
             # The team console (TeamConsole): its function reads its sign-in's settings (and
             # the operator's, as a JobClient does); the Cognito trigger reads none.
             "ConsoleFunction": "console", "ConsoleTokenScopesFunction": "trigger"}

# Non-default values for the free-form string parameters (numbers and lists of allowed values
# get theirs from the template). A new string parameter needs one here.
SAMPLES: dict[str, str] = {
    "TaskFamily": "acme-worker",
    "CapacityStrategy": "FARGATE:1",
    "MetricsNamespace": "acme/longjobs",
    "AllowedKinds": "report,resize.v2",
    "PriorityWeights": "high=5,normal=4,low=2",
    "KindLimits": "report=10,resize.v2=50",
    "TaskKindConcurrency": "report=2",
    "Handlers": "report=acme_jobs.report:run,resize.v2=acme_jobs.images:resize",
    "EventBus": "acme-jobs",
    "Prices": "vcpu=0.05,spot=0.25",
}

# Parameters whose default is not the setting's, on purpose.
AWS_DEFAULTS = {
    # Spot first with an on-demand base on AWS; the setting's default (launch type FARGATE)
    # suits local mode and a client's dry run.
    "CapacityStrategy",
}

# Where each role's deployed process reads its settings: a file (every function in it) or the
# named functions of a module. The functions run the handlers, the pipeline and the adapters it
# builds; the worker runs job_runner and the adapters it builds.
READERS: dict[str, tuple[tuple[str, tuple[str, ...] | None], ...]] = {
    "dispatcher": (("dispatcher/handlers.py", None), ("dispatcher/wiring/pipeline.py", None),
                   ("dispatcher/wiring/adapters.py",
                    ("client", "store", "queues", "ecs_target", "launcher"))),
    "runner": (("job_runner", None), ("dispatcher/wiring/adapters.py", ("client", "store"))),
    "console": (("dispatcher/console/lambda_entry.py", None), ("dispatcher/console/team.py", None)),
    # The publisher: its handler, and the adapters it builds (an events client, the sink).
    "events": (("dispatcher/handlers.py", ("publish_job_events",)),
               ("dispatcher/wiring/adapters.py", ("client", "event_sink"))),
}

# "The total size of all environment variables doesn't exceed 4 KB" (Lambda quotas:
# https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
LAMBDA_ENV_BYTES = 4096


@pytest.fixture(scope="module")
def sam_template() -> dict[str, Any]:
    return yaml_parse(TEMPLATE.read_text())


@pytest.fixture(scope="module")
def transformed(sam_template: dict[str, Any]) -> dict[str, Any]:
    return sam_expand(sam_template)


def environments(transformed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each deployed process's environment as CloudFormation receives it (values unresolved)."""
    res = transformed["Resources"]
    names = {n for n, r in res.items() if r["Type"] == "AWS::Lambda::Function"}
    assert names == set(PROCESSES) - {"worker"}, "a function was added: give it a role here"
    out = {n: res[n]["Properties"].get("Environment", {}).get("Variables", {}) for n in names}
    (task,) = [r for r in res.values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert container["Name"] == Config().container
    out["worker"] = {e["Name"]: e["Value"] for e in container["Environment"]}
    return out


def variables_of(setting: Env) -> tuple[str, ...]:
    return (setting.name, setting.fallback) if setting.fallback else (setting.name,)


def from_parameter(value: Any) -> str | None:
    """The parameter an env value passes unchanged (a Ref, or a list joined by commas)."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return str(value["Ref"])
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        sep, parts = value["Fn::Join"]
        if sep == "," and isinstance(parts, dict) and set(parts) == {"Ref"}:
            return str(parts["Ref"])
    return None


def parsed(setting: Env, value: str) -> Any:
    """What the settings make of ``value`` given for ``setting`` alone."""
    (attr,) = [a for a, s in settings.declaration() if s is setting]
    return getattr(settings.load("metrics", {setting.name: value}), attr)


def operator_settings() -> list[Env]:
    return [s for s in settings.SETTINGS if s.on_aws is OnAws.PARAMETER]


def config_reads(path: Path, functions: tuple[str, ...] | None) -> set[str]:
    """The settings the code at ``path`` reads from a Config (``cfg.x``, ``self.cfg.x``)."""
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    read: set[str] = set()
    for file in files:
        tree = ast.parse(file.read_text(encoding="utf-8"))
        nodes: list[ast.AST] = [tree]
        if functions is not None:
            nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                     and n.name in functions]
            assert {n.name for n in nodes} == set(functions), f"{file}: functions renamed?"
        for node in nodes:
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and n.attr in Config.model_fields and (
                        (isinstance(n.value, ast.Name) and n.value.id == "cfg")
                        or (isinstance(n.value, ast.Attribute) and n.value.attr == "cfg")):
                    read.add(n.attr)
    return read


@pytest.mark.parametrize("role", sorted(READERS))
def test_the_roles_name_every_process_that_reads_a_setting(role: str) -> None:
    """The reachability tests below trust Env.roles; here the code of each deployed process
    says what it reads, so a setting read by the worker and declared for the dispatcher only
    fails (it would never reach the worker)."""
    read = set().union(*(config_reads(ROOT / path, functions)
                         for path, functions in READERS[role]))
    by_attr = dict(settings.declaration())
    undeclared = sorted(a for a in read if role not in by_attr[a].roles)
    assert not undeclared, f"the {role} reads settings whose roles omit it: {undeclared}"
    assert len(read) >= {"dispatcher": 20, "runner": 10, "events": 2, "console": 5}[role]


def test_every_setting_reaches_each_process_that_reads_it(transformed: dict[str, Any]) -> None:
    envs = environments(transformed)
    problems = []
    for process, role in PROCESSES.items():
        env = envs[process]
        for s in settings.SETTINGS:
            given = [v for v in variables_of(s) if v in env]
            if s.on_aws in (OnAws.AWS, OnAws.LOCAL):
                if given:
                    problems.append(f"{process} sets {given}, which the stack leaves to "
                                    f"{'AWS' if s.on_aws is OnAws.AWS else 'local mode'}")
                continue
            if role not in s.roles:
                continue
            if len(given) != 1:
                problems.append(f"{process} reads {s.name} but its environment sets "
                                f"{given or 'none'} of {list(variables_of(s))}")
            elif s.parameter and from_parameter(env[given[0]]) != s.parameter:
                problems.append(f"{process}: {given[0]} is {env[given[0]]}, not the "
                                f"parameter {s.parameter}")
    assert not problems, "\n".join(problems)


def test_the_template_sets_only_settings_the_stack_may_set(transformed: dict[str, Any]) -> None:
    """No variable names a setting that does not exist (a typo, a removed setting), and an
    operator-settable one comes from its parameter wherever it is set."""
    by_variable = {v: s for s in settings.SETTINGS for v in variables_of(s)}
    problems = []
    for process, env in environments(transformed).items():
        for name, value in env.items():
            setting = by_variable.get(name)
            if setting is None:
                problems.append(f"{process} sets {name}, which dispatcher/settings.py does not "
                                "declare")
            elif setting.parameter and from_parameter(value) != setting.parameter:
                problems.append(f"{process} sets {name} to {value}, not from the parameter "
                                f"{setting.parameter}")
    assert not problems, "\n".join(problems)


def test_every_operator_setting_is_a_parameter_in_one_group(sam_template: dict[str, Any]) -> None:
    params = sam_template["Parameters"]
    missing = [f"{s.name} -> {s.parameter}" for s in operator_settings()
               if s.parameter not in params]
    assert not missing, f"operator-settable settings without their parameter: {missing}"
    groups = sam_template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [p for g in groups for p in g["Parameters"]]
    assert sorted(grouped) == sorted(params), (
        "every parameter belongs to exactly one ParameterGroups group: "
        f"not grouped {sorted(set(params) - set(grouped))}, unknown "
        f"{sorted(set(grouped) - set(params))}, twice "
        f"{sorted({p for p in grouped if grouped.count(p) > 1})}")


def test_parameter_defaults_are_the_settings_defaults(sam_template: dict[str, Any]) -> None:
    params = sam_template["Parameters"]
    checked, differ = 0, []
    for s in operator_settings():
        p = params.get(str(s.parameter), {})  # a missing one: the test above names it
        if s.required or "Default" not in p or s.parameter in AWS_DEFAULTS:
            continue
        (attr,) = [a for a, x in settings.declaration() if x is s]
        checked += 1
        if parsed(s, str(p["Default"])) != Config.model_fields[attr].default:
            differ.append(f"{s.parameter}: {p['Default']!r}")
    assert not differ, f"defaults not the settings' (else list them in AWS_DEFAULTS): {differ}"
    assert checked >= 30


def bounds(attr: str) -> tuple[bool, bool]:
    """Whether the setting's field has a lower and an upper bound."""
    metadata = Config.model_fields[attr].metadata
    return (any(isinstance(m, annotated_types.Ge | annotated_types.Gt) for m in metadata),
            any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in metadata))


def test_cloudformation_refuses_what_the_settings_refuse(sam_template: dict[str, Any]) -> None:
    """A bad value fails the deploy, not every tick after it: a number setting's parameter is
    a Number bounded where the setting is, its bounds and allowed values are valid values,
    and its default fits its pattern."""
    params = sam_template["Parameters"]
    problems = []
    for attr, s in settings.declaration():
        if s.parameter not in params:  # a missing one: the test above names it
            continue
        p = params[s.parameter]
        numeric = Config.model_fields[attr].annotation in (int, float)
        if numeric != (p["Type"] == "Number"):
            problems.append(f"{s.parameter}: Type {p['Type']} for a setting of "
                            f"{Config.model_fields[attr].annotation}")
        lower, upper = bounds(attr)
        if (lower and "MinValue" not in p) or (upper and "MaxValue" not in p):
            problems.append(f"{s.parameter}: the setting is bounded, the parameter is not")
        for value in [p[k] for k in ("MinValue", "MaxValue") if k in p] + p.get("AllowedValues",
                                                                                  []):
            try:
                parsed(s, str(value))
            except ConfigError as exc:
                problems.append(f"{s.parameter} allows {value!r}: {exc}")
        for value in (str(p.get("Default", "")), SAMPLES.get(s.parameter, "")):
            if "AllowedPattern" in p and value and not re.fullmatch(p["AllowedPattern"], value):
                problems.append(f"{s.parameter}: {value!r} does not fit its pattern")
    assert not problems, "\n".join(problems)


def other_values(params: dict[str, Any]) -> dict[str, Any]:
    """A value, not the default, for each parameter of an operator-settable setting; numbers
    are distinct, so a variable wired to another parameter shows."""
    out: dict[str, Any] = {}
    for s in operator_settings():
        name, p = str(s.parameter), params.get(str(s.parameter))
        if p is None:  # test_every_operator_setting_is_a_parameter_in_one_group names it
            continue
        if name in SAMPLE_PARAMETERS:  # no default: what `sam deploy --guided` asks for
            out[name] = SAMPLE_PARAMETERS[name]
        elif name in SAMPLES:
            out[name] = SAMPLES[name]
        elif "AllowedValues" in p:
            out[name] = next(v for v in p["AllowedValues"] if str(v) != str(p["Default"]))
        elif p["Type"] == "Number":
            low, high = p.get("MinValue", float("-inf")), p.get("MaxValue", float("inf"))
            used = {v for v in out.values() if isinstance(v, int | float)}
            out[name] = next(v for k in range(1, 100) for v in (p["Default"] + k,
                                                                 p["Default"] - k)
                             if low <= v <= high and v not in used)
        else:
            pytest.fail(f"{name}: add a non-default value for it to SAMPLES")
    return out


def rendered(transformed: dict[str, Any], values: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each process's environment as deployed with these parameter values (others: default)."""
    params = {n: {**p, "Default": values.get(n, p.get("Default"))}
              for n, p in transformed["Parameters"].items()}
    doc = {**transformed, "Parameters": params}
    return {process: {k: str(resolve(v, doc)) for k, v in env.items()}
            for process, env in environments(transformed).items()}


def test_a_parameter_value_reaches_the_settings_unchanged(sam_template: dict[str, Any],
                                                          transformed: dict[str, Any]) -> None:
    values = other_values(sam_template["Parameters"])
    envs = rendered(transformed, values)
    checked, problems = 0, []
    for process, role in PROCESSES.items():
        cfg = settings.load(role, envs[process])
        for attr, s in settings.declaration():
            if s.parameter not in values or role not in s.roles:
                continue
            value = values[s.parameter]
            text = ",".join(value) if isinstance(value, list) else str(value)
            (variable,) = [v for v in variables_of(s) if v in envs[process]]
            checked += 1
            if envs[process][variable] != text:
                problems.append(f"{process}: {s.parameter}={text!r} gave {variable}="
                                f"{envs[process][variable]!r}")
            elif getattr(cfg, attr) != parsed(s, text):
                problems.append(f"{process}: {attr} is {getattr(cfg, attr)!r}, not {text!r}")
            elif getattr(cfg, attr) == Config.model_fields[attr].default:
                problems.append(f"{process}: {s.parameter}={text!r} is the default; the test "
                                "cannot tell it arrived")
    assert not problems, "\n".join(problems)
    assert checked == sum(role in s.roles for s in operator_settings() if s.parameter in values
                          for role in PROCESSES.values()) > 40


def test_each_function_environment_fits_lambdas_limit(sam_template: dict[str, Any],
                                                       transformed: dict[str, Any]) -> None:
    envs = rendered(transformed, other_values(sam_template["Parameters"]))
    for process in PROCESSES:
        if process != "worker":
            size = len(json.dumps(envs[process], separators=(",", ":")))
            assert size < LAMBDA_ENV_BYTES, f"{process}: {size} bytes of environment"
