"""The deployment record (``DEPLOY#current``): the job code launches run.

One item, read with one strongly consistent GetItem, written only conditionally on the version
that was read (absent for the first deploy), so two writers (two deploys, a deploy and the
tick re-deriving the deployment after a stack update) never interleave: the later one to write
finds another version and gets a ``ConflictError``, having written nothing.
"""

from __future__ import annotations

from dataclasses import replace

from dispatcher.domain.deployment import EARLIER_KEPT, Deployment, Earlier
from dispatcher.ports.table import Absent, Eq, Put
from dispatcher.store import codec as r
from dispatcher.store.base import Reads


class Deployments(Reads):
    """Read and replace the deployment record."""

    def deployment(self) -> Deployment | None:
        """The deployed job code, or None when nothing was ever deployed (one GetItem)."""
        rec = self.table.get(r.DEPLOY_KEY)
        return r.record_deployment(rec) if rec else None

    def save_deployment(self, new: Deployment, read: Deployment | None) -> Deployment:
        """Replace the record read (``read``; None: there was none) with ``new``, one version
        later; return what was written. ``ConflictError`` if the record changed since it was
        read (another deploy, or a tick re-deriving it): nothing is written then."""
        earlier = [] if read is None else [
            Earlier(read.task_definition, read.image, read.updated_at, read.updated_by),
            *read.earlier][:EARLIER_KEPT]
        written = replace(new, version=(read.version if read else 0) + 1,
                          updated_at=self.clock(), earlier=earlier)
        expected = Absent() if read is None else Eq("version", read.version)
        self._write(Put(r.deployment_record(written), expected),
                    "the deployment changed while it was being replaced (another deploy, or "
                    "the dispatcher re-deriving it after a stack update); nothing was written")
        return written
