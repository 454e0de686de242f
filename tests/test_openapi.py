"""The OpenAPI document is true, and fuzzing every operation from it against
the real process never gets a 5xx or a dropped connection."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from tests.server_process import ServerProcess
from web import api_events, api_webhooks  # noqa: F401 - they document their operations
from web.openapi import PATHS, document

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("fuzz")
    srv = ServerProcess(str(base / "data"), log_dir=str(base), env={
        "SVC_RATE_LIMIT_PER_KEY": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0"}).start()
    with srv.client("sk_test") as c:  # give the fuzzer something real to find
        c.patch("/v1/platforms", json={"ios": {"appStoreId": "1234567890"},
                                       "android": {"packageName": "com.example.app"}})
        for i in range(3):
            c.post("/v1/links", json={"path": f"/p/{i}", "slug": f"fuzz{i}"})
    yield srv
    srv.stop()
    assert "Traceback" not in srv.logs(), srv.logs()[-3000:]


def _served_operations(srv: ServerProcess) -> set[tuple[str, str]]:
    from web.router import Router  # noqa: F401 - documents where paths() comes from

    doc = httpx.get(srv.url + "/v1/openapi.json").json()
    return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}


def test_every_served_route_is_documented_and_back(fuzz_server: ServerProcess) -> None:
    import trio

    from actors.clock import SystemClock
    from svc_engine.config import Config
    from web.api import Api

    # Build the router the way the service does and compare its table.
    async def routes() -> set[tuple[str, str]]:
        from storage.lmdb_store import LmdbStore
        store = LmdbStore(fuzz_server.data_dir + "-probe", map_size=16 << 20)
        try:
            async with trio.open_nursery() as n:
                from web.assembly import start_services
                await n.start(store.writer.run)
                services = await start_services(n, Config(data_dir=store.path), store,
                                                SystemClock(), b"s" * 32)
                table = set(Api(services).router.paths())
                n.cancel_scope.cancel()
            return table
        finally:
            store.close()

    served = trio.run(routes)
    documented = _served_operations(fuzz_server)
    assert served == documented, {"undocumented": served - documented,
                                  "not served": documented - served}


def test_document_is_openapi_3_1(fuzz_server: ServerProcess) -> None:
    doc = httpx.get(fuzz_server.url + "/v1/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    for path, ops in doc["paths"].items():
        assert path.startswith("/v1/")
        for params in re.findall(r"{(\w+)}", path):
            for op in ops.values():
                assert any(p["name"] == params and p["in"] == "path"
                           for p in op.get("parameters", [])), (path, params)
    assert set(PATHS) <= set(doc["paths"])
    # a write (it takes an Idempotency-Key) may be refused with 503
    # storage_unavailable when the store cannot commit (a full disk)
    writes = [op for ops in doc["paths"].values() for op in ops.values()
              if any(p["name"] == "Idempotency-Key" for p in op.get("parameters", []))]
    assert len(writes) >= 10
    assert all("storage_unavailable" in op["responses"]["503"]["description"] for op in writes)
    # a keyed operation's 401 names the challenge every 401 carries
    keyed = [op for ops in doc["paths"].values() for op in ops.values() if op.get("security")]
    assert keyed and all(op["responses"]["401"]["headers"]["WWW-Authenticate"]["schema"]
                         == {"const": 'Bearer realm="svc"'} for op in keyed)
    r = httpx.get(fuzz_server.url + "/v1/links")
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="svc"'


# Every operation, from the document itself (no server needed to collect).
SCHEMA = schemathesis.openapi.from_dict(document("http://placeholder"))
OPERATIONS = [r.ok() for r in SCHEMA.get_all_operations()]
# Negative cases need something to break: a body or a parameter.
CASES = [(op, mode) for op in OPERATIONS for mode in GenerationMode
         if mode is GenerationMode.POSITIVE
         or "requestBody" in op.definition.raw or op.definition.raw.get("parameters")]


def _headers(operation: Any, srv: ServerProcess) -> dict[str, str]:
    security = operation.definition.raw.get("security") or [{}]
    scheme = next(iter(security[0]), None)
    if scheme == "sdkKey":
        return {"Authorization": f"Bearer {srv.info['keys']['pk_test']}"}
    if scheme == "secretKey":
        return {"Authorization": f"Bearer {srv.info['keys']['sk_test']}"}
    return {}


@pytest.mark.parametrize(("operation", "mode"), CASES,
                         ids=[f"{o.label} {m.value}" for o, m in CASES])
def test_fuzz_no_server_errors(operation: Any, mode: GenerationMode,
                               fuzz_server: ServerProcess) -> None:
    headers = _headers(operation, fuzz_server)

    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=fuzz_server.url, headers=headers, timeout=10)
        assert response.status_code < 500, (case.method, case.formatted_path,
                                            response.status_code, response.text[:300])

    run()
