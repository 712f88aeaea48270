"""Test-support helpers shipped with the package, like dramatiq's stub broker.

They live inside ``dispatcher`` (not ``tests/``) so that the job runner's subprocess tests,
benchmarks and local mode can all start the same moto server and fidelity proxy: the gaps
between moto and real AWS are closed in one place instead of in every caller.
"""
