"""The composition root: the one place that picks adapters and wires them to the stages.

- :mod:`dispatcher.wiring.adapters` builds the AWS adapters the settings name (queues, table,
  ECS), for every caller: the Lambda handlers, the producer client, ``top``, ``deploy``, the
  dry run and the job runner;
- :mod:`dispatcher.wiring.pipeline` wires adapters (those, the in-memory twins, the dry run's
  wrappers, local mode's launcher) to the stages.

The package itself imports nothing, so the job runner loads the adapters without the stages.
"""
