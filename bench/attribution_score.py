"""Precision and recall of attribution, per flow and overall.

One ``Observation`` per device: its flow, the link it really came from
(``truth``, None for an organic install) and the link the service delivered
to the app for that install (``got``: the first launch's link, or the
resolve's or handoff claim's when the launch had none; None when nothing was
delivered). Links are any comparable keys (the drivers use ``app:index``).

- attributed: devices that got a link;
- correct: devices that got their true link;
- precision = correct / attributed (None when nothing was attributed);
- recall = correct / devices with a true link (None when the flow has none,
  as for organic installs, whose figure of merit is ``false_attributions``:
  links delivered to devices that tapped nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

OVERALL = "overall"


@attrs.frozen
class Observation:
    flow: str
    truth: str | None
    got: str | None


@attrs.frozen
class FlowScore:
    flow: str
    devices: int
    with_truth: int
    attributed: int
    correct: int
    false_attributions: int

    @property
    def wrong(self) -> int:
        return self.attributed - self.correct

    @property
    def precision(self) -> float | None:
        return self.correct / self.attributed if self.attributed else None

    @property
    def recall(self) -> float | None:
        return self.correct / self.with_truth if self.with_truth else None

    def to_json(self) -> dict[str, object]:
        return {"flow": self.flow, "devices": self.devices, "with_truth": self.with_truth,
                "attributed": self.attributed, "correct": self.correct, "wrong": self.wrong,
                "false_attributions": self.false_attributions,
                "precision": self.precision, "recall": self.recall}


def score_one(flow: str, observations: Iterable[Observation]) -> FlowScore:
    devices = with_truth = attributed = correct = false = 0
    for o in observations:
        devices += 1
        with_truth += o.truth is not None
        if o.got is not None:
            attributed += 1
            correct += o.got == o.truth
            false += o.truth is None
    return FlowScore(flow, devices, with_truth, attributed, correct, false)


def score(observations: Sequence[Observation],
          flows: Sequence[str] = ()) -> tuple[FlowScore, ...]:
    """One score per flow (in ``flows`` order, then any other flow in order of
    first appearance), then the ``overall`` score of all observations."""
    order = list(dict.fromkeys([*flows, *(o.flow for o in observations)]))
    by_flow: dict[str, list[Observation]] = {f: [] for f in order}
    for o in observations:
        by_flow[o.flow].append(o)
    return (*(score_one(f, by_flow[f]) for f in order), score_one(OVERALL, observations))
