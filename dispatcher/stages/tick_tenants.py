"""The tenants' shares as one tick goes (dispatcher/stages/tenant_slots.py), made the first time
a bundle of a tenant is in view: running as the tick begins, due, or met by the drain. A stack
whose jobs name no tenant never makes them, and reads and writes nothing for them.

Every launch path of the tick goes through it: the due work's read (:meth:`TickTenants.keep`:
a tenant at its cap is passed over, and the read pages on past its backlog), the due work
launched and the slots left at the drain's end (:meth:`TickTenants.admit`: caps, and the
tenants furthest below their targets first), and the drain's own launches
(:meth:`TickTenants.limits`, read when its first job of a tenant comes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher.domain.bundles import Bundle
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.tenant_slots import TenantLimits, TenantRoom, TenantSlots, key
from dispatcher.store import StageStore

log = logging.getLogger(__name__)


class TickTenants:
    """``live``: the bundles running as the tick begins; ``slots``: the running tasks' limit."""

    def __init__(self, store: StageStore, slots: int, half_life: float,
                 clock: Callable[[], float], live: list[Bundle]) -> None:
        self._store = store
        self._slots = slots
        self._half_life = half_life
        self._clock = clock
        self._live = live
        self._launched: list[Bundle] = []  # launched before the shares were made
        self.shares: TenantSlots | None = None
        if any(b.tenant for b in live):
            self.make()

    def make(self) -> TenantSlots:
        """The shares (made once): the policies and usage read (one read), the usage
        counted on to now and written (one write)."""
        if self.shares is None:
            policies, usage, since = self._store.tenant_state()
            now = self._clock()
            shares = TenantSlots(self._slots, policies, usage, self._live)
            shares.usage = shares.usage_now(self._live, since, now, self._half_life)
            shares.took(self._launched)
            try:
                self._store.save_tenant_usage(shares.usage, now)
            except TableUnavailable as exc:  # only an order among equals: the next tick's
                log.error("saving the tenants' usage failed", extra={"reason": exc.reason})
            self.shares = shares
        return self.shares

    def saw(self, bundles: list[Bundle]) -> None:
        """Due work in view: its tenants' shares are made if one names a tenant."""
        if self.shares is None and any(b.tenant for b in bundles):
            self.make()
        if self.shares is not None:
            self.shares.seen |= {key(b.tenant) for b in bundles}

    def looked_past(self, live: list[Bundle]) -> tuple[set[str | None], set[str | None]]:
        """With no slot free: the tenants whose due work a look pages past (those running,
        and those given no slot of their own), and those it pages on for (short of their
        reserves)."""
        shares = self.make()
        return {b.tenant for b in live} | shares.given_none(), shares.short_of_reserve()

    def keep(self, bundles: list[Bundle]) -> list[Bundle]:
        """``bundles`` their tenants' caps let start, in their order."""
        if self.shares is None and not any(b.tenant for b in bundles):
            return bundles
        return self.make().within_caps(bundles)

    def at_cap(self, bundle: Bundle) -> bool:
        """Whether ``bundle``'s tenant is at its cap: none of its work launches for the rest
        of the tick (its tasks only grow as the tick goes)."""
        if self.shares is None and not bundle.tenant:
            return False
        return self.make().room(bundle.tenant) == 0

    def admit(self, bundles: list[Bundle]) -> list[Bundle]:
        """``bundles`` their tenants' caps let start, the tenants furthest below their
        targets first within each priority."""
        if self.shares is None and not any(b.tenant for b in bundles):
            return bundles
        return self.make().admit(bundles)

    def limits(self) -> TenantRoom:
        """For the drain: the caps left and the weights, or how to read them."""
        if self.shares is not None:
            return self.shares.caps_left()
        return self._limits_when_met

    def _limits_when_met(self) -> TenantLimits:
        return self.make().caps_left()

    def took(self, bundles: list[Bundle]) -> None:
        """``bundles`` launched."""
        if self.shares is not None:
            self.shares.took(bundles)
        else:
            self._launched += bundles
