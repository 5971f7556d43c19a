"""The offline web world (docs/world.md): generator, sites, server, search, tasks, scripted expert.

Public API (see docs/world.md):

* :class:`~harness.world.generator.WorldConfig`, :func:`~harness.world.generator.generate_world`
* :class:`~harness.world.server.WorldServer`
* :class:`~harness.world.search.SearchIndex`
* :class:`~harness.world.toolbox.WorldToolbox`
* :mod:`harness.world.tasks`: ``generate_tasks``, ``write_tasks``, ``load_tasks``, ``task_prompt``, ``rebase``
* :mod:`harness.world.schemas`: ``BENCHMARKS`` (the task styles), ``task_prompt``, ``task_id``, ``benchmark_of``
* :mod:`harness.world.expert`: ``ExpertConfig``, ``ExpertPlanner``, ``ExpertSubAgent``, ``run_expert_episode``
* :func:`~harness.world.judge.expert_judge`

Submodules are imported on use (this file imports nothing), so ``world serve`` stays light.
"""
