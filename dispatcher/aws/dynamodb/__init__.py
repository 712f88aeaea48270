"""Persistence: ``base`` is the Store port, ``dynamodb`` the pynamodb adapter, ``models`` the
table's one item model (single-table design)."""
