"""The example database every door shares: a directory, or a Redis server for many machines.

Hypothesis saves every failing example's choices under a key per machine
(one per SUT and scenario) and replays them first on the next run, so a bug
found once, by any process pointing at the same database, reappears within a
couple of examples. ``open_database`` turns the ``--database`` value into
Hypothesis's own implementations:

* a directory path: ``DirectoryBasedExampleDatabase`` (safe for processes on
  one machine), behind a ``KeepingDatabase`` that never deletes and says, once,
  when a save could not be written (Hypothesis itself drops it without a word);
  a front door refuses a directory it cannot write before any search;
* ``redis://host:port/db``: ``RedisExampleDatabase``, behind a
  ``ResilientDatabase`` that mirrors everything into a local directory, so a
  lost Redis costs no finding: saves made while it is gone are written through
  when it answers again.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from peftlife.world.words import count


class DatabaseError(ValueError):
    """A ``--database`` value that cannot be used; the message says how to fix it."""


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# How long a call may wait on Redis before it counts as lost, and how often a
# lost Redis is tried again: short, so a campaign never stalls on it.
_TIMEOUT_S = 2.0
_RETRY_S = 2.0


def open_database(
    url: str,
    *,
    local: Path | None = None,
    warn: Callable[[str], None] | None = None,
    require: bool = True,
    option: str = "--database",
) -> ExampleDatabase:
    """The database a ``--database`` value names.

    ``local`` is the directory that mirrors a Redis database (default
    ``.peftlife/database``); ``warn`` is told, once per outage, when Redis is
    lost and when it is back. With ``require`` Redis must answer now (a front
    door's check); without, a Redis that does not answer starts out lost.
    ``option`` is the door's name for the value, which its errors give.

    >>> import tempfile
    >>> open_database(tempfile.mkdtemp())
    KeepingDatabase(DirectoryBasedExampleDatabase(...))
    """
    if not url.startswith(REDIS_SCHEMES):
        path = Path(url).expanduser()
        if path.exists() and not path.is_dir():
            raise DatabaseError(
                f"{option} {url!r} is a file; give a directory or redis://host:port/db"
            )
        if require and (err := unwritable(path)) is not None:
            raise DatabaseError(
                f"--database {url!r} cannot be written ({_why(err)}); give a directory "
                "you can write, or redis://host:port/db"
            )
        return KeepingDatabase(DirectoryBasedExampleDatabase(str(path)), warn=warn)
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError as err:
        raise DatabaseError(f"{option} {url!r} needs the redis client: pip install redis") from err
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=_TIMEOUT_S, socket_timeout=_TIMEOUT_S
        )
    except ValueError as err:
        raise DatabaseError(f"{option} {url!r} is not a Redis URL ({err})") from err
    unreachable = None
    try:
        client.ping()
    except redis.RedisError as err:
        unreachable = err
        if require:
            raise DatabaseError(
                f"{option} {url!r}: cannot reach Redis ({err}); "
                f"start it (redis-server --port PORT) or give a directory as {option}"
            ) from err
    mirror = DirectoryBasedExampleDatabase(str(local or Path(".peftlife") / "database"))
    db = ResilientDatabase(
        RedisExampleDatabase(client, key_prefix=b"peftlife:"),
        mirror,
        url=url,
        lost=(redis.RedisError, OSError),
        warn=warn or (lambda message: None),
    )
    if unreachable is not None:
        db.lose(unreachable)
    return db


def unwritable(path: Path) -> OSError | None:
    """Why a directory database at ``path`` cannot be written (made if missing), or None.

    Tried, not guessed from permissions: a path under a regular file, or under
    ``/proc``, refuses even root, whom every permission check lets through.

    >>> unwritable(Path(tempfile.mkdtemp())) is None
    True
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".peftlife-probe-")
    except OSError as err:
        return err
    with open(fd, "wb"):
        pass
    Path(probe).unlink()
    return None


def _why(err: OSError) -> str:
    return f"{err.strerror}: {err.filename}" if err.filename else str(err.strerror or err)


def _to_stderr(message: str) -> None:
    print(f"peftlife: {message}", file=sys.stderr)


class KeepingDatabase(ExampleDatabase):
    """A shared database whose entries no run deletes, and that says when it cannot save.

    Hypothesis deletes a saved failure that no longer fails when it replays it.
    In a database shared by runs of different depth (a campaign's ``nightly``
    examples, a developer's ``dev`` ones), a failure too deep for the shorter
    run would be lost for every run. Saved failures therefore stay; one that
    no longer fails costs each later run one example. (Redis entries also
    expire after a week unused.)

    Hypothesis's directory database drops a save it cannot write without a
    word; this one reads each save back, and tells ``warn`` once (default: a
    line on stderr) that the database stopped saving, and why.

    >>> from hypothesis.database import InMemoryExampleDatabase
    >>> db = KeepingDatabase(InMemoryExampleDatabase())
    >>> db.save(b"k", b"v"); db.delete(b"k", b"v"); list(db.fetch(b"k"))
    [b'v']
    """

    def __init__(self, inner: ExampleDatabase, warn: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._warn = warn or _to_stderr
        # Whether a save was lost: said once, not once per save.
        self.failing = False

    def __repr__(self) -> str:
        return f"KeepingDatabase({self.inner!r})"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(key, value)
        # Saves are rare (a failing example, not every example): reading one back is cheap.
        if self.failing or value in set(self.inner.fetch(key)):
            return
        self.failing = True
        path = getattr(self.inner, "path", None)
        err = None if path is None else unwritable(Path(path))
        why = "" if err is None else f" ({_why(err)})"
        self._warn(
            f"could not save to the example database {str(path or self.inner)!r}{why}; "
            "the run goes on and its findings are reported, but are not kept for the next run"
        )

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(key)

    def delete(self, key: bytes, value: bytes) -> None:
        pass

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.save(dest, value)


class ResilientDatabase(ExampleDatabase):
    """A shared database that survives losing its server, with a local mirror.

    Like ``KeepingDatabase`` it never deletes. Every save lands in the local
    mirror first, then in the shared database.
    While the shared one is lost, reads come from the mirror, and saves wait
    in a pending list that is written through as soon as it answers again.
    Nothing a search found is ever lost with the server.
    """

    def __init__(
        self,
        shared: ExampleDatabase,
        local: ExampleDatabase,
        *,
        url: str,
        lost: tuple[type[BaseException], ...],
        warn: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.shared = shared
        self.local = local
        self.url = url
        self._lost_errors = lost
        self._warn = warn
        self._clock = clock
        self._down_since: float | None = None
        self._next_try = 0.0
        self.pending: list[tuple[bytes, bytes]] = []

    def __repr__(self) -> str:
        return f"ResilientDatabase({self.url!r})"

    @property
    def available(self) -> bool:
        return self._down_since is None

    def _shared(self, operation: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one call against the shared database; (False, None) while it is lost."""
        if self._down_since is not None:
            if self._clock() < self._next_try:
                return False, None
            if not self._reconnect():
                return False, None
        try:
            return True, operation()
        except self._lost_errors as err:
            self.lose(err)
            return False, None

    def lose(self, err: BaseException) -> None:
        """Count the shared database as lost from now; try it again in a while."""
        now = self._clock()
        self._down_since = now
        self._next_try = now + _RETRY_S
        self._warn(
            f"lost the example database at {self.url} ({err}); fuzzing goes on, "
            "findings are kept locally and written through when it is back"
        )

    def _reconnect(self) -> bool:
        try:
            for key, value in self.pending:
                self.shared.save(key, value)
        except self._lost_errors:
            self._next_try = self._clock() + _RETRY_S
            return False
        written = len(self.pending)
        self.pending.clear()
        self._down_since = None
        self._warn(
            f"the example database at {self.url} is back; wrote through {count(written, 'save')}"
        )
        return True

    def save(self, key: bytes, value: bytes) -> None:
        self.local.save(key, value)
        ok, _ = self._shared(lambda: self.shared.save(key, value))
        if not ok:
            self.pending.append((key, value))

    def fetch(self, key: bytes) -> Iterable[bytes]:
        ok, values = self._shared(lambda: list(self.shared.fetch(key)))
        # The mirror holds what this machine saved, the shared one what any machine did.
        seen = set(values) if ok else set()
        yield from values if ok else ()
        yield from (v for v in self.local.fetch(key) if v not in seen)

    def delete(self, key: bytes, value: bytes) -> None:
        pass  # see KeepingDatabase: one run's miss is not every run's

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.save(dest, value)
