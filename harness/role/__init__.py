"""One role of a decoupled M-GRPO run (arXiv 2511.13288) as its own process (docs/paper.md, docs/training.md, docs/report.md).

``python -m harness.role --role planner|sub --config CFG --run-dir DIR --world-url URL [--tasks DIR]``
(:mod:`harness.role.__main__`); ``python -m harness train`` starts them. Modules:

* :mod:`harness.role.planner` -- the planner role: its rollout, periodic evaluation, :func:`run_planner`;
* :mod:`harness.role.sub` -- the sub role: the sub-agent service, its store-fed trainer
  (:class:`~harness.role.sub.SubRoleTrainer`), :func:`run_sub`;
* :mod:`harness.role.common` -- what both share: store signals, config and model loading, the toolbox,
  the TRL arguments of a role, its step records;
* :mod:`harness.role.checkpoints` -- complete checkpoints and the resume clean-up;
* :mod:`harness.role.tasks` -- the run's prepared task set (``<run>/tasks/``), written once before the roles
  start and read by them.

A role starts forward only: config -> task set -> models -> tools -> trainer. Nothing here imports a heavy
library at import time except :mod:`harness.role.sub` (its trainer subclasses the TRL one).
"""
