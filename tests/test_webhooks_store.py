"""WebhookStore's listings (storage/webhooks_store.py) at their bounds: the
newest deliveries up to the limit, a status filter that stops after
``SCAN_CAP`` index entries, and the history purge's deliveries created
strictly before its cutoff, at most its limit."""

from __future__ import annotations

import pytest

from storage import webhooks_store
from storage.lmdb_store import LmdbStore
from svc_engine import webhook_delivery as wd
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import DeliveryStatus
from tests.test_webhook_writes import PROJECT, T0, Owner, _delivered, _delivery, _seed


async def test_recent_lists_the_newest_up_to_the_limit(store: LmdbStore) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(1, 4)]
    await _seed(owner, *ds)
    assert owner.tables.recent(PROJECT, Mode.LIVE, limit=2) == [ds[2], ds[1]]
    assert owner.tables.recent(PROJECT, Mode.LIVE, limit=3) == ds[::-1]


async def test_a_status_filter_reads_at_most_scan_cap_entries(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(1, 5)]
    oldest_done = _delivered(wd.begin_attempt(ds[0]))
    await _seed(owner, oldest_done, *ds[1:])
    delivered = DeliveryStatus.DELIVERED
    monkeypatch.setattr(webhooks_store, "SCAN_CAP", 4)
    assert owner.tables.recent(PROJECT, Mode.LIVE, status=delivered) == [oldest_done]
    monkeypatch.setattr(webhooks_store, "SCAN_CAP", 3)  # the 4th newest is not read
    assert owner.tables.recent(PROJECT, Mode.LIVE, status=delivered) == []


async def test_the_purge_takes_deliveries_made_before_its_cutoff_at_most_its_limit(
        store: LmdbStore) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(1, 4)]  # made at T0 + 1, + 2, + 3
    await _seed(owner, *ds)
    assert [e.delivery for e in owner.tables.expired(T0 + 3, 10)] == ds[:2]
    assert [e.delivery for e in owner.tables.expired(T0 + 4, 2)] == ds[:2]
    assert all(e.project_id == PROJECT for e in owner.tables.expired(T0 + 4, 10))
    assert owner.tables.expired(T0 + 1, 10) == []
