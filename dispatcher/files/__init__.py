"""Adapters over local files (local mode's task output)."""
