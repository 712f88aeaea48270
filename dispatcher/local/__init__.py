"""Local mode: the whole system on one machine (moto's server, local task processes)."""
