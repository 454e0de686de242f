"""The dashboard: server-rendered pages under ``/dashboard`` (see app.py)."""

from web.dashboard.app import create_dashboard

__all__ = ["create_dashboard"]
