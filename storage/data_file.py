"""A look at ``data.mdb`` before LMDB maps it: is it cut short?

LMDB reads its pages through the map, so a file shorter than the store its
newest commit describes (a copy that did not finish, a disk that filled
while copying) kills the process with SIGBUS at the first read past the
end, with no word of why. The two meta pages at the start of the file say
how long the store is: the newer one (the higher transaction id) names the
last page in use. Read here with plain file I/O, before any map exists.

Layout of a meta page (LMDB 0.9, 64-bit): a 16-byte page header, then
``mm_magic`` (u32) at 16, ``mm_version`` (u32) at 20, the page size in the
free DB's ``md_pad`` (u32) at 40, ``mm_last_pg`` (u64) at 136 and
``mm_txnid`` (u64) at 144. The second meta page starts one page in.
"""

from __future__ import annotations

import os
import struct

MAGIC = 0xBEEFC0DE
_META = struct.Struct("<II16xI92xQQ")  # magic, version, psize, last page, txn id


def cut_short(path: str) -> str | None:
    """Why the data file in directory ``path`` is shorter than its store, or
    None (also when there is no file, or it is no LMDB file: LMDB says so)."""
    name = os.path.join(path, "data.mdb")
    try:
        with open(name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            first = f.read(_META.size + 16)
            if len(first) < _META.size + 16:
                return None if size == 0 else _said(size, 2 * 4096)
            magic, _, psize, *_ = _META.unpack_from(first, 16)
            if magic != MAGIC or psize < 512 or psize & (psize - 1):
                return None
            f.seek(psize)
            second = f.read(_META.size + 16)
    except OSError:
        return None
    metas = [_META.unpack_from(first, 16)]
    if len(second) == _META.size + 16:
        metas.append(_META.unpack_from(second, 16))
    if len(metas) < 2 or metas[1][0] != MAGIC:
        return _said(size, 2 * psize)
    _, _, _, last_page, _ = max(metas, key=lambda m: m[4])
    need = (last_page + 1) * psize
    return _said(size, need) if size < need else None


def _said(size: int, need: int) -> str:
    return (f"data.mdb is {size:,} bytes, but the store it holds needs {need:,}: the file "
            "was cut short (a copy that did not finish, a disk that filled)")


RESTORE = "restore the data directory from a backup (`svc backup`)"
