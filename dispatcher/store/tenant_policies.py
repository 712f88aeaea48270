"""Tenants' policies and usage in the table (dispatcher.domain.tenant_shares).

- ``TENANT#policies``: every tenant with a policy of its own (weight, cap, reserve), in one
  item the tick reads with the usage (one BatchGetItem a tick, and only when a tenant is in
  view); an operator's change is a conditional write on its ``version``, so two changes made at
  once never lose one. At most :data:`~dispatcher.domain.tenant_shares.MAX_CONFIGURED` tenants
  have one; the rest have the default.
- ``TENANT#usage``: each tenant's vCPU-seconds, decayed, as of ``updated_at``: written by the
  tick (the lease holder) once a tick while a tenant runs or its usage has not decayed away.
- ``SHED#<tenant>#<tick>``: how many of a tenant's tasks gave up their slot as that tick asked
  (:meth:`TenantPolicies.shed`): a conditional add, so no more than asked do.
"""

from __future__ import annotations

from collections.abc import Mapping

from dispatcher.domain import tenant_shares
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.tenant_shares import TenantPolicy
from dispatcher.ports.table import (
    Add,
    ConditionFailed,
    Lacks,
    Lt,
    Or,
    Put,
    Record,
    Set,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads

# Usage below this many vCPU-seconds is dropped from the item (it ranks as none).
USAGE_FLOOR = 1.0
# The most tenants the usage item keeps (the highest): the rest rank as having used none.
USAGE_KEPT = 2000
# A shed count outlives its tick by this much (then expires).
SHED_TTL_SECONDS = 3600.0


class TenantPolicyError(LongjobsError):
    """A tenant's policy could not be set: the reason says why."""


class TenantPolicies(Reads):
    """Reading and writing tenants' policies and usage."""

    def tenant_policies(self) -> dict[str, TenantPolicy]:
        """Every tenant with a policy of its own."""
        return _policies(self.table.get(r.TENANT_POLICIES_KEY))

    def tenant_state(self) -> tuple[dict[str, TenantPolicy], dict[str, float], float | None]:
        """The policies, the usage and when it was counted: one read."""
        got = {rec.pk: rec for rec in self.table.get_many([r.TENANT_POLICIES_KEY,
                                                            r.TENANT_USAGE_KEY])}
        usage = got.get(r.TENANT_USAGE_KEY)
        counted = usage.tenants if usage is not None and isinstance(usage.tenants, dict) else {}
        return (_policies(got.get(r.TENANT_POLICIES_KEY)),
                {str(t): float(u) for t, u in counted.items()},
                usage.updated_at if usage is not None else None)

    def save_tenant_usage(self, usage: Mapping[str, float], at: float) -> None:
        """Each tenant's decayed usage as of ``at`` (written by the lease holder only); the
        smallest are left out (see :data:`USAGE_FLOOR`, :data:`USAGE_KEPT`)."""
        kept = sorted(((u, t) for t, u in usage.items() if u >= USAGE_FLOOR), reverse=True)
        self.table.write(Put(Record(r.TENANT_USAGE_KEY, updated_at=at, tenants={
            t: round(u, 3) for u, t in kept[:USAGE_KEPT]})))

    def set_tenant_policy(self, tenant: str, *, weight: float | None = None,
                          max_running: int | None = None, reserve: int | None = None,
                          no_cap: bool = False, reset: bool = False) -> TenantPolicy:
        """Change ``tenant``'s policy (the settings given; ``no_cap`` lifts its cap; ``reset``
        puts it back to the default) and return it. One read and one conditional write
        (:meth:`change_versioned`)."""
        made: list[TenantPolicy] = []

        def change(rec: Record | None) -> Record:
            policies = _policies(rec)
            was = policies.get(tenant, tenant_shares.DEFAULT)
            new = tenant_shares.DEFAULT if reset else TenantPolicy(
                weight=was.weight if weight is None else weight,
                max_running=None if no_cap else was.max_running if max_running is None
                else max_running,
                reserve=was.reserve if reserve is None else reserve)
            why = tenant_shares.policy_problem(new.weight, new.max_running, new.reserve)
            if why is not None:
                raise TenantPolicyError(f"tenant {tenant}: {why}")
            if new == tenant_shares.DEFAULT:
                policies.pop(tenant, None)
            else:
                policies[tenant] = new
            if len(policies) > tenant_shares.MAX_CONFIGURED:
                raise TenantPolicyError(
                    f"tenant {tenant}: {tenant_shares.MAX_CONFIGURED} tenants have a policy of "
                    "their own already; put one back to the default first "
                    "(longjobs tenants set NAME --reset)")
            made[:] = [new]
            return Record(r.TENANT_POLICIES_KEY, updated_at=self.clock(),
                          tenants={t: p.to_json() for t, p in sorted(policies.items())})

        self.change_versioned(r.TENANT_POLICIES_KEY, change, lambda: TenantPolicyError(
            f"tenant {tenant}: other changes kept coming first; try again"))
        return made[0]

    def shed(self, tenant: str, tick_at: float, asked: int) -> bool:
        """Whether this task gives up its slot as the tick of ``tick_at`` asked ``asked`` of
        ``tenant``'s tasks to: one conditional add, granted to the first ``asked``."""
        try:
            self.table.write(Update(r.shed_key(tenant, tick_at), [
                Add("shed", 1), Set("expires_at", self.clock() + SHED_TTL_SECONDS)],
                Or(Lacks("shed"), Lt("shed", asked))))
        except ConditionFailed:
            return False
        return True


def _policies(rec: Record | None) -> dict[str, TenantPolicy]:
    data = rec.tenants if rec is not None and isinstance(rec.tenants, dict) else {}
    return {str(t): TenantPolicy.from_json(p) for t, p in data.items()}
