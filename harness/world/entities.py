"""The offline world's records, shared by the generator and the renderer (docs/world.md).

:class:`Entity` and :class:`Fact` are the entity graph that :mod:`harness.world.generator` draws;
:class:`Page` is what :mod:`harness.world.render` makes of it. They live here, below both modules,
so that the generator can call the renderer without the renderer importing the generator back
(no import cycle). :mod:`harness.world.generator` re-exports them, so
``from harness.world.generator import Entity`` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entity:
    """One invented entity. ``attrs`` maps a relation name to its value (see :data:`harness.world.generator.RELATIONS`)."""

    id: str
    kind: str  # city | org | person | product | event
    name: str
    slug: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fact:
    """``subject``'s ``relation`` is ``value`` (canonical string); ``value_id`` if it is an entity."""

    subject: str
    relation: str
    value: str
    value_id: str | None = None
    shown: str = ""
    """The text a page shows for the value (empty: same as ``value``)."""


@dataclass
class Page:
    """One HTML page of the world."""

    path: str
    """Absolute path on the world server, e.g. ``/wiki/brisca.html``."""
    title: str
    """The ``<title>``; unique across the world."""
    html: str
    site: str
    """``wiki``, ``news``, ``portal`` or ``site/<org-slug>``."""
    depth: int
    """Clicks from the site's home page (WebWalkerQA depth)."""
    facts: tuple[tuple[str, str], ...] = ()
    """(subject id, relation) of every fact this page states."""
