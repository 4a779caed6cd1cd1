"""Where a request's cache lives in one pool: the word the KV pools, the call ledger and
the snapshots share (a module of its own, so the ledger need not import the pools)."""

from __future__ import annotations

import enum


class Residency(enum.Enum):
    """Where a request's cache lives in one pool."""

    NONE = "none"
    ACTIVE = "active"
    SUSPENDED = "suspended"
