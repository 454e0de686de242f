"""The registry of benchmark targets.

``BASELINE_TARGETS`` are measured in every run, because every result is
reported as a ratio to them. ``SERVICE_TARGETS`` is where the service's paths
are added as the service grows (redirect with click recording, SDK init,
resolve, events batches, handoff, webhook deliveries, attribution). It is
empty until those paths exist: the harness never reports a number it did not
measure.

A service target runs the real service on ``{port}`` with its data under
``{workdir}``, and usually needs a ``prepare`` hook to create links and write
the slug list wrk draws from, e.g.::

    Target(
        name="redirect-plain",
        description="GET /<slug> -> 302, click recorded",
        server=("{python}", "-m", "web.cli", "serve", "--port", "{port}",
                "--data", "{workdir}/data"),
        ready_path="/healthz",
        paths_file="{workdir}/slugs.txt",
        prepare=create_links_and_write_slugs,
    )
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.events_bench import EVENTS_TARGETS
from bench.results import H11_302, HYPERCORN_302
from bench.service_targets import DEFERRED_TARGETS, INIT_TARGETS, REDIRECT_TARGETS
from bench.target import Target

BASELINE_TARGETS: tuple[Target, ...] = (
    Target(
        name=HYPERCORN_302,
        description="bare ASGI app on Hypercorn's trio worker, GET -> 302",
        server=("{python}", "-m", "bench.baselines.hypercorn_302", "--port", "{port}"),
        group="baseline",
        paths=("/s1",),
    ),
    Target(
        name=H11_302,
        description="bare trio + h11 keep-alive server, GET -> 302",
        server=("{python}", "-m", "bench.baselines.h11_302", "--port", "{port}"),
        group="baseline",
        paths=("/s1",),
    ),
)

SERVICE_TARGETS: tuple[Target, ...] = (
    REDIRECT_TARGETS + INIT_TARGETS + DEFERRED_TARGETS + EVENTS_TARGETS
)
"""The service's paths; add new ones here."""


def all_targets() -> tuple[Target, ...]:
    return BASELINE_TARGETS + SERVICE_TARGETS


def select(only: Sequence[str]) -> tuple[Target, ...]:
    """The baselines plus the service targets named in ``only`` (all of them if empty).

    Baselines always run: the ratios need them from the same run.
    ``ValueError`` names any unknown target.
    """
    known = {t.name for t in all_targets()}
    unknown = sorted(set(only) - known)
    if unknown:
        raise ValueError(
            f"unknown target(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    chosen = [t for t in SERVICE_TARGETS if not only or t.name in only]
    return BASELINE_TARGETS + tuple(chosen)
