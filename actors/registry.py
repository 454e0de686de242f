"""The registry: one ProjectActor per project, started on first use.

Actors run in the service's root nursery (handed in), never in a request's.
If an actor's task ends with an error, the registry forgets it and the next
request starts a fresh one from durable state; other projects are unaffected.
"""

from __future__ import annotations

import logging

import attrs
import trio

from actors.clock import Clock
from actors.project import ProjectActor
from storage.lmdb_store import LmdbStore
from svc_engine.errors import NotFound

log = logging.getLogger("svc.registry")


@attrs.define
class RegistryStats:
    running: int = 0
    started: int = 0
    crashed: int = 0


class Registry:
    def __init__(self, store: LmdbStore, clock: Clock, nursery: trio.Nursery) -> None:
        self._store = store
        self._clock = clock
        self._nursery = nursery
        self._actors: dict[str, ProjectActor] = {}
        self._starting: dict[str, trio.Event] = {}
        self._stats = RegistryStats()

    def statistics(self) -> RegistryStats:
        self._stats.running = len(self._actors)
        return attrs.evolve(self._stats)

    def running(self, project_id: str) -> ProjectActor | None:
        return self._actors.get(project_id)

    async def get(self, project_id: str) -> ProjectActor:
        while True:
            actor = self._actors.get(project_id)
            if actor is not None:
                return actor
            starting = self._starting.get(project_id)
            if starting is None:
                break
            await starting.wait()
        if self._store.get_project(project_id) is None:
            raise NotFound(f"no project {project_id}")
        event = self._starting[project_id] = trio.Event()
        try:
            actor = ProjectActor(project_id, self._store, self._clock)
            await self._nursery.start(self._supervise, actor)
            self._actors[project_id] = actor
            self._stats.started += 1
            return actor
        finally:
            del self._starting[project_id]
            event.set()

    async def _supervise(self, actor: ProjectActor, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await actor.run(task_status=task_status)
        except Exception:
            self._stats.crashed += 1
            log.exception("actor of project %s crashed; it restarts on next use",
                          actor.project_id)
        finally:
            actor.mailbox.close()
            if self._actors.get(actor.project_id) is actor:
                del self._actors[actor.project_id]
