"""web: the outer ring (ASGI front, API handlers, redirector, dashboard, CLI)."""
