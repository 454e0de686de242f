"""actors: the owners of mutable state (per-project actors, the timer, senders)."""
