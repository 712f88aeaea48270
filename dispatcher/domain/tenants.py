"""Tenants: whom a job's work is for (``tenant="acme"``), a team or a customer of the platform.

A job names its tenant (``--tenant`` / ``tenant=`` on submit; producers' default, the setting
``LONGJOBS_TENANT``); a job without one belongs to no tenant. Bundles never mix tenants:
every bundle is of one tenant or of none, so a task runs one tenant's jobs and what a tenant
used is its tasks' (their costs, counted by ``stats --by tenant``; their tags,
``longjobs:tenant``).

A bundle's tenant is written into its id (:func:`bundle_id`): the status index, which lists
due and active bundles, cannot take a new attribute without a new index (its projection is
fixed when it is made), and every reader of a bundle has its id. Those who match bundles by
tenant — a runner taking a follow-on or another batch's work, the hand-off of urgent jobs —
read it from the id (:func:`of_bundle`), as they read a follow-on's batch from its id.

Bounded so that it fits an id, a tag value, an index key and a counter's group: 1-64
characters of ``[A-Za-z0-9._-]`` (no ``@``, which ends it in a bundle's id, nor ``:`` or
``=``, which the groups and labels use).
"""

from __future__ import annotations

import re

MAX_TENANT = 64
TENANT = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Ends a tenant's name in a bundle's id (and is in no tenant's name, nor in a drain's hex ids).
MARK = "@"
# What the label index files a job's tenant under: no label key holds "@"
# (dispatcher.domain.labels.KEY), so it never meets a producer's label.
INDEX_KEY = "@tenant"
# The group the jobs of no tenant are counted in (``stats --by tenant``); no tenant's name.
NONE = "(none)"


def problem(tenant: object) -> str | None:
    """Why ``tenant`` is refused, or None."""
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        return f"tenant {tenant!r} must be 1-{MAX_TENANT} characters of [A-Za-z0-9._-]"
    return None


def checked(tenant: str | None) -> str | None:
    """``tenant`` if valid (None and "" are none); ValueError saying the form."""
    if not tenant:
        return None
    if (why := problem(tenant)) is not None:
        raise ValueError(why)
    return tenant


def bundle_id(tenant: str | None, rest: str) -> str:
    """A bundle's (or a batch's) id for ``tenant``'s jobs: ``<tenant>@<rest>``; ``rest`` alone
    for jobs of no tenant."""
    return f"{tenant}{MARK}{rest}" if tenant else rest


def of_bundle(bundle_id_: str) -> str | None:
    """The tenant a bundle's (or batch's) id names, or None."""
    tenant, mark, _ = bundle_id_.partition(MARK)
    return tenant if mark else None
