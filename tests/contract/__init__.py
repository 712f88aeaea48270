"""Contract suites: each runs one set of tests against a twin and the real adapter on moto."""
