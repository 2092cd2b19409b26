"""Keyset pagination shared by the job and event listings: the opaque cursor a page
hands out (the last row's `seq` or event id) and the largest page served.
"""

from __future__ import annotations

import base64

from scheduler.store import errors

MAX_PAGE = 500


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith("s"):
            raise ValueError
        seq = int(raw[1:])
        if not 0 <= seq < 2**63:  # beyond a BIGINT column: no row has it
            raise ValueError
        return seq
    except ValueError:
        raise errors.Invalid("not a cursor this API returned", loc=("query", "cursor")) from None
