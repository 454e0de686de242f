"""storage: the LMDB-backed Store (one environment, one group-commit writer)."""
