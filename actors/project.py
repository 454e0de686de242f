"""The ProjectActor: the one owner of a project's mutable state.

It is started by the registry on first use and loads its state from the store.
Every mutation of the project's state (settings today; tokens, click windows,
handoffs and endpoint health as those land) is a call in its mailbox, so rules
like single use and newest-wins hold without locks. Reads on hot paths (the
redirect's slug lookup) go straight to the store and skip the mailbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import trio

from actors.clock import Clock
from actors.mailbox import Mailbox
from storage.lmdb_store import LmdbStore
from storage.writer import Op, Pending
from svc_engine.errors import NotFound
from svc_engine.records import Project
from svc_engine.settings import DeferredSettings, apply_patch
from svc_engine.store import IdemWrite

log = logging.getLogger("svc.project")
T = TypeVar("T")
MAILBOX_CAPACITY = 1024


class ProjectActor:
    def __init__(self, project_id: str, store: LmdbStore, clock: Clock) -> None:
        self.project_id = project_id
        self.mailbox = Mailbox(f"project {project_id}", MAILBOX_CAPACITY)
        self._store = store
        self._clock = clock
        self.project: Project | None = None
        self.settings = DeferredSettings()
        self.loads = 0

    def _load(self) -> None:
        project = self._store.get_project(self.project_id)
        if project is None:
            raise NotFound(f"no project {self.project_id}")
        self.project = project
        self.settings = self._store.get_settings(self.project_id)
        self.loads += 1

    async def _reload(self) -> None:
        self._load()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._load()
        task_status.started()
        await self.mailbox.serve(on_failure=self._reload)

    # -- calls (each runs inside the actor's task) ---------------------------------

    async def submit(self, build: Callable[[DeferredSettings], Op[T]]) -> Pending[T]:
        """Queue an attribution op built with the current settings. The op
        decides inside the write transaction, so rules like single use hold;
        the caller awaits the returned commit, so the actor never waits for a
        disk flush. The settings are read here, not through the mailbox: they
        are a frozen record that only the mailbox's calls replace, ops reach the
        writer in the order they are submitted, and a PATCH still in progress
        is not yet acknowledged, so an op built with the settings before it is
        as correct as one queued behind it. (A mailbox round trip was two task
        switches on every SDK call; bench/README.md.)"""
        return await self._store.submit(build(self.settings))

    async def get_settings(self) -> DeferredSettings:
        return await self.mailbox.call(lambda: self.settings)

    async def patch_settings(self, patch: object, idem: IdemWrite | None) -> DeferredSettings:
        async def do() -> DeferredSettings:
            new = apply_patch(self.settings, patch)
            await self._store.put_settings(self.project_id, new, idem)
            self.settings = new
            return new

        return await self.mailbox.call(do)
