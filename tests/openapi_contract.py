"""Checking the served OpenAPI document against the service's real behaviour.

``Contract`` reads the document the service serves (``/v1/openapi.json``) and
judges a request body by its operation's request schema and an answer by the
response documented for its status: the status must be listed, its required
headers sent (and a ``Retry-After`` sent must be documented), an error's code
named in that status's description, and the body must fit the schema
*closed*: every object schema that names properties is read with
``additionalProperties: false``, so a field the service sends that the
document does not name is a failure (the document itself stays open to
additions). JSON Schema 2020-12 (the OpenAPI 3.1 dialect) with formats
checked, by jsonschema_rs (schemathesis's validator).

``Recorder`` is an httpx response hook that runs every answer of a test's
client through the contract, so a test checks everything it sends.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import jsonschema_rs
import orjson

from tests.conftest import App

Schema = dict[str, Any]


def _inline(node: Any, components: dict[str, Schema]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            return _inline(components[ref.rsplit("/", 1)[1]], components)
        return {k: _inline(v, components) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, components) for v in node]
    return node


def closed(node: Any) -> Any:
    """``node`` with ``additionalProperties: false`` on every object schema
    that names properties and says nothing of others."""
    node = copy.deepcopy(node)

    def close(n: Any) -> None:
        if isinstance(n, dict):
            if isinstance(n.get("properties"), dict) and "additionalProperties" not in n:
                n["additionalProperties"] = False
            for k, v in n.items():
                if k != "properties":
                    close(v)
                else:
                    for sub in v.values():
                        close(sub)
        elif isinstance(n, list):
            for v in n:
                close(v)

    close(node)
    return node


def errors_of(schema: Schema, value: Any) -> list[str]:
    validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    return [f"{'/'.join(map(str, e.instance_path)) or '.'}: {e.message}"
            for e in validator.iter_errors(value)]


class Contract:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        components = doc["components"]["schemas"]
        self.paths: dict[str, dict[str, Any]] = _inline(doc["paths"], components)
        exact = [p for p in self.paths if "{" not in p]
        templated = [p for p in self.paths if "{" in p]
        self._routes = [(p, re.compile("^" + re.sub(r"{\w+}", "[^/]+", p) + "$"))
                        for p in (*exact, *templated)]

    def template(self, path: str) -> str | None:
        return next((t for t, rx in self._routes if rx.match(path)), None)

    def operations(self) -> Iterator[tuple[str, str]]:
        for path, ops in self.paths.items():
            for method in ops:
                yield method.upper(), path

    def request_schema(self, method: str, path: str) -> Schema | None:
        """The operation's request body schema; None when it is not documented."""
        template = self.template(path)
        op = self.paths.get(template or "", {}).get(method.lower(), {})
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        return None if body is None else body["schema"]

    def refuses(self, method: str, path: str, body: Any) -> bool | None:
        """Whether the documented request schema refuses ``body``; None when
        the operation or its body is not documented."""
        schema = self.request_schema(method, path)
        return None if schema is None else bool(errors_of(schema, body))

    def judge(self, method: str, path: str, status: int, headers: httpx.Headers,
              content: bytes) -> list[str]:
        template = self.template(path)
        where = f"{method} {path} -> {status}"
        if template is None or method.lower() not in self.paths[template]:
            return [f"{where}: operation not documented"]
        spec = self.paths[template][method.lower()]["responses"].get(str(status))
        if spec is None:
            return [f"{where}: status not documented"]
        problems = [f"{where}: header {name} not sent"
                    for name, h in spec.get("headers", {}).items()
                    if h.get("required") and name.lower() not in headers]
        if "retry-after" in headers and "Retry-After" not in spec.get("headers", {}):
            problems.append(f"{where}: Retry-After sent, not documented")
        ctype = headers.get("content-type", "").split(";")[0].strip()
        media = spec.get("content", {})
        if ctype not in media:
            return [*problems, f"{where}: content type {ctype!r} not documented"]
        if ctype != "application/json":
            return problems
        value = orjson.loads(content)
        problems += [f"{where}: {e}" for e in errors_of(closed(media[ctype]["schema"]), value)]
        if status >= 400:
            code = value.get("error", {}).get("code", "")
            if not re.search(rf"\b{re.escape(code)}\b", spec.get("description", "")):
                problems.append(f"{where}: code {code!r} not named in "
                                f"{spec.get('description')!r}")
        return problems


class Recorder:
    """Judges every answer its clients receive; ``seen``: (method, template,
    status) of each. Problems of the operations in ``aside`` (templates) are
    kept apart, in ``aside_problems``."""

    def __init__(self, contract: Contract, aside: Iterable[str] = ()) -> None:
        self.contract = contract
        self.aside = frozenset(aside)
        self.problems: list[str] = []
        self.aside_problems: list[str] = []
        self.seen: set[tuple[str, str, int]] = set()

    async def hook(self, response: httpx.Response) -> None:
        await response.aread()
        request = response.request
        path = request.url.path
        template = self.contract.template(path) or path
        found = self.contract.judge(request.method, path, response.status_code,
                                    response.headers, response.content)
        (self.aside_problems if template in self.aside else self.problems).extend(found)
        self.seen.add((request.method, template, response.status_code))

    def client(self, app: App, key: str | None = None, **headers: str) -> httpx.AsyncClient:
        h = {"content-type": "application/json", **headers}
        if key is not None:
            h["authorization"] = f"Bearer {app.keys.get(key, key)}"
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app.front),
                                 base_url="http://svc.test", headers=h,
                                 event_hooks={"response": [self.hook]})


async def contract_of(app: App, aside: Iterable[str] = ()) -> tuple[Contract, Recorder]:
    """The contract of the document ``app`` serves, and a recorder on it."""
    async with app.client() as c:
        r = await c.get("/v1/openapi.json")
    assert r.status_code == 200
    contract = Contract(r.json())
    return contract, Recorder(contract, aside)
