"""The parts of a setting's declaration (:mod:`dispatcher.settings`): where it comes from
(:class:`Env`, :class:`OnAws`) and how a value of each compound type is read from its variable."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from dispatcher.domain.costs import Prices

ALL_ROLES = ("dispatcher", "client", "runner")


class OnAws(StrEnum):
    """Who sets a setting where longjobs runs on AWS (the SAM stack, ``infra/template.yaml``).

    The deployed processes are the two functions (role ``dispatcher``: the tick and the
    task-event handler both wire the whole pipeline) and the worker task (role ``runner``);
    ``tests/integration/test_stack_settings.py`` holds the template to this for each of them.
    """

    PARAMETER = "parameter"  # the operator: the stack parameter Env.parameter names sets it
    STACK = "stack"  # the stack itself, from its own resources or a constant it depends on
    AWS = "aws"  # Lambda and ECS set it in every function and task
    LOCAL = "local"  # local mode and commands run elsewhere; the stack leaves it unset


@dataclass(frozen=True)
class Env:
    """Where one :class:`Config` field comes from: the variable (``fallback`` is read when the
    variable is unset or empty), the roles that read it, what it means, and who sets it on AWS
    (``on_aws``, keyword-only and without a default, so a new setting cannot leave it out)."""

    name: str
    meaning: str
    roles: tuple[str, ...] = ("dispatcher",)
    required: bool = False  # for the roles listed
    fallback: str | None = None
    on_aws: OnAws = field(kw_only=True)

    @property
    def parameter(self) -> str | None:
        """The stack parameter of an operator-settable setting: its name without ``LONGJOBS_``
        in CamelCase (``LONGJOBS_KIND_LIMITS`` is ``KindLimits``); None for the others."""
        if self.on_aws is not OnAws.PARAMETER:
            return None
        return "".join(word.capitalize()
                       for word in self.name.removeprefix("LONGJOBS_").split("_"))


@dataclass(frozen=True)
class CapacityProvider:
    provider: str
    weight: int
    base: int = 0


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _strategy(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    out = []
    for part in _split(value):
        fields = part.split(":")
        if len(fields) not in (2, 3) or not fields[0]:
            raise ValueError(f"{part!r} is not provider:weight[:base]")
        try:
            out.append(CapacityProvider(fields[0], int(fields[1]),
                                        int(fields[2]) if len(fields) == 3 else 0))
        except ValueError:
            raise ValueError(f"{part!r} is not provider:weight[:base]") from None
    return tuple(out)


def one_of(*allowed: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError("must be " + " or ".join(repr(a) for a in allowed))
        return value
    return AfterValidator(check)


def kind_limits(value: Any) -> Any:
    """``kind=n,kind=n`` -> {kind: n} (``LONGJOBS_KIND_LIMITS``); anything else as given."""
    if not isinstance(value, str):
        return value
    out: dict[str, int] = {}
    for part in _split(value):
        kind, sep, n = part.partition("=")
        if not sep or not kind.strip() or not n.strip().isdigit() or int(n) < 1:
            raise ValueError(f"{part!r} is not kind=n with n >= 1")
        out[kind.strip()] = int(n)
    return out


def _seconds_range(value: Any) -> Any:
    """``a`` or ``a-b`` (seconds) -> (a, b)."""
    if not isinstance(value, str):
        return value
    low, _, high = value.partition("-")
    try:
        pair = (float(low), float(high or low))
    except ValueError:
        raise ValueError(f"{value!r} is not seconds or min-max seconds") from None
    if not 0 <= pair[0] <= pair[1]:
        raise ValueError(f"{value!r}: need 0 <= min <= max")
    return pair


def _prices(value: Any) -> Any:
    """``vcpu=0.04048,gb=0.004445,arm_vcpu=...,arm_gb=...,spot=0.3`` -> Prices, each part
    optional (the rest keep their defaults); empty: the defaults."""
    if not isinstance(value, str):
        return value
    names = {"vcpu": "vcpu_hour", "gb": "gb_hour", "arm_vcpu": "arm_vcpu_hour",
             "arm_gb": "arm_gb_hour", "spot": "spot_factor"}
    given: dict[str, float] = {}
    for part in _split(value):
        name, sep, number = part.partition("=")
        try:
            price = float(number)
        except ValueError:
            price = -1.0
        if not sep or name.strip() not in names or not 0 <= price < 1000:
            raise ValueError(f"{part!r} is not name=price with a name of "
                             f"{', '.join(names)} and a price from 0")
        given[names[name.strip()]] = price
    return Prices(**given)


Names = Annotated[tuple[str, ...], BeforeValidator(_split)]
PriceList = Annotated[Prices, BeforeValidator(_prices)]
Limits = Annotated[dict[str, int], BeforeValidator(kind_limits)]
SecondsRange = Annotated[tuple[float, float], BeforeValidator(_seconds_range)]
Strategy = Annotated[tuple[CapacityProvider, ...], BeforeValidator(_strategy)]
