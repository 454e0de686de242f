"""When to log one more of a run of the same failure, by count.

The first failure is logged; then the next line waits for 2 more failures,
then 4, 8 … doubling up to ``2**cap`` (1,024 by default) and staying there:
a burst of failures shows as a handful of lines with counts, and a steady
trickle still shows now and then. The caller keeps the count (every failure
so far) and this record; the record says whether a line is due.
"""

from __future__ import annotations

import attrs

CAP = 10
"""Lines are at most 2**CAP failures apart."""


@attrs.frozen
class LogBackoff:
    logged_at: int = 0  # the count when the last line was logged
    lines: int = 0  # lines logged so far, up to the cap: the next waits 2**lines

    def after(self, count: int, cap: int = CAP) -> LogBackoff | None:
        """The record once a line is logged at ``count`` failures, when one is
        due; None when this failure is not logged."""
        if count - self.logged_at < 2 ** self.lines:
            return None
        return LogBackoff(count, min(self.lines + 1, cap))
