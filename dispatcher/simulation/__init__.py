"""The virtual-time simulation of AWS: the production tick, store and runner paths run against
the twins behind a model of AWS's latencies and limits, in a fraction of the real time
(``bench/seed_scale.py``, ``bench/arrays.py``). Test support, as :mod:`dispatcher.testing` (whose
twins it runs on) is: nothing in production imports it."""
