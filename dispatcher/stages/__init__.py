"""The stages of one job's walk, one module each, called by the tick and never calling up.

admit (:mod:`.admit`) -> bundle (:mod:`.bundle`) -> record (:mod:`.recorder`) -> launch
(:mod:`.launch`), orchestrated by the tick (:mod:`.tick`); a task's stop is observed by
:mod:`.rerun`, which hands a normal finish to :mod:`.finish` and settles an early stop as the
stop policy (:mod:`dispatcher.domain.stop_policy`) decides; :mod:`.reconcile` finds the stops
whose events were lost. The ``stages`` import contract in pyproject.toml keeps this order.
"""
