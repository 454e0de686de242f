"""A small path router: exact segments and ``{name}`` placeholders.

Unknown paths are 404 ``not_found``; a known path with another method is 405
``method_not_allowed`` with an ``Allow`` header.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from svc_engine.errors import MethodNotAllowed, NotFound
from web.http import Request, Response

Handler = Callable[[Request], Awaitable[Response]]


class Router:
    def __init__(self) -> None:
        self._exact: dict[str, dict[str, Handler]] = {}
        self._patterns: list[tuple[tuple[str, ...], dict[str, Handler]]] = []

    def add(self, method: str, path: str, handler: Handler) -> None:
        if "{" not in path:
            self._exact.setdefault(path, {})[method] = handler
            return
        segs = tuple(path.strip("/").split("/"))
        for existing, methods in self._patterns:
            if existing == segs:
                methods[method] = handler
                return
        self._patterns.append((segs, {method: handler}))

    def route(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        methods = self._exact.get(path)
        params: dict[str, str] = {}
        if methods is None:
            parts = path.strip("/").split("/")
            for segs, ms in self._patterns:
                if len(segs) != len(parts):
                    continue
                found: dict[str, str] = {}
                for s, p in zip(segs, parts, strict=True):
                    if s.startswith("{"):
                        if not p:
                            break
                        found[s[1:-1]] = p
                    elif s != p:
                        break
                else:
                    methods, params = ms, found
                    break
        if methods is None:
            raise NotFound(f"no route for {path}")
        handler = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
        if handler is None:
            raise MethodNotAllowed(f"{method} is not allowed here",
                                   allowed=tuple(sorted(methods)))
        return handler, params

    def paths(self) -> list[tuple[str, str]]:
        """Every (method, path) served; the OpenAPI test compares against it."""
        out = [(m, p) for p, ms in self._exact.items() for m in ms]
        out += [(m, "/" + "/".join(s)) for s, ms in self._patterns for m in ms]
        return sorted(out)
