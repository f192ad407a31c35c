"""A sweep directory's state: the results database (one SQLite file, one row per job) and the
lock that keeps one live sweep per directory.

A row is created `pending` when its sweep first lists it, becomes `running` when a worker claims
it, and ends `emerged`, `censored`, `diverged`, `leaked` (the run's outcome) or `failed` (the job
raised).
Each change is one transaction, so a process killed at any moment leaves every row either as it
was or as it became. Several processes may write at once (WAL journal, busy timeout).

The file is marked with SQLite's `application_id`; a file that is not SQLite, or an SQLite file
of something else, is refused rather than overwritten.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..core.errors import ConfigError
from ..core.record import RunRecord

APPLICATION_ID = 0x454D4231  # "EMB1"
SCHEMA_VERSION = 1
FINISHED = ("emerged", "censored", "diverged", "leaked")
STATUSES = ("pending", "running", *FINISHED, "failed")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    position INTEGER NOT NULL,         -- order in the sweep spec
    in_spec INTEGER NOT NULL DEFAULT 1, -- listed by the spec the sweep last ran
    task TEXT NOT NULL,
    arch TEXT NOT NULL,
    seed INTEGER NOT NULL,
    lr REAL NOT NULL,
    config TEXT NOT NULL,              -- the resolved RunConfig, JSON
    status TEXT NOT NULL DEFAULT 'pending',
    steps_to_emergence INTEGER,
    steps INTEGER,
    wall_time_s REAL,
    steps_per_s REAL,
    result TEXT,                       -- result.json of a finished run
    error TEXT,                        -- traceback of a failed job
    versions TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,                       -- host:pid of the last claim
    started_at REAL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class ResultsDB:
    """A sweep's `results.sqlite`. Open one per process; every method is one transaction."""

    FILENAME = "results.sqlite"

    def __init__(self, path: Path | str, create: bool = False, read_only: bool = False):
        """Open (or with `create`, make) the database at `path`. A `read_only` reader opens it
        through SQLite's own read-only mode: it never writes, checkpoints or removes the WAL a
        live sweep is using. Nothing here opens the file outside SQLite: closing any descriptor
        of a file drops every POSIX lock this process holds on it, including those of another
        connection to the same database (a live sweep's), so a Python-level peek at the header
        would let another process delete the WAL under it."""
        self.path = Path(path)
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: a directory where the results database should be a "
                              "file; refusing to touch it")
        if not create and not self.path.is_file():
            raise ConfigError(f"{self.path.parent}: no results database ({self.path.name}) here")
        if self.path.is_file() and not self.path.stat().st_size:
            raise ConfigError(f"{self.path}: an empty file, not a results database; refusing to "
                              "touch it (remove it to start afresh)")
        target = f"file:{self.path.absolute()}?mode=ro" if read_only else str(self.path)
        try:
            self.conn = sqlite3.connect(target, timeout=60.0, isolation_level=None,
                                        uri=read_only)
        except sqlite3.Error as e:
            raise ConfigError(f"{self.path}: not a readable results database ({e})") from None
        try:
            self.conn.execute("PRAGMA busy_timeout = 60000")
            try:  # SQLite reads the header: a file that is not SQLite fails here, untouched
                app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
            except sqlite3.DatabaseError as e:
                if "not a database" not in str(e):
                    raise
                raise ConfigError(f"{self.path}: not an SQLite file (corrupt or foreign); "
                                  "refusing to overwrite it") from None
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables and app_id != APPLICATION_ID:
                raise ConfigError(f"{self.path}: an SQLite database of something else "
                                  "(not an emergence-bench results database); refusing to touch it")
            if not tables:
                if read_only:
                    raise ConfigError(f"{self.path}: an empty SQLite file, not a results "
                                      "database")
                self._create()
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise ConfigError(f"{self.path}: results schema version {version}, this "
                                  f"emergence-bench reads version {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise ConfigError(f"{self.path}: not a readable results database ({e})") from None
        except ConfigError:
            self.conn.close()
            raise

    def _create(self) -> None:
        # one transaction: a file is either empty or a complete, marked results database
        self.conn.executescript(f"BEGIN IMMEDIATE; {SCHEMA}; "
                                f"PRAGMA application_id = {APPLICATION_ID}; "
                                f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        self.conn.execute("PRAGMA journal_mode = WAL")

    def transaction(self):
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    # --- the sweep's side ----------------------------------------------------------------
    def sync(self, jobs: Iterable[Any], meta: dict[str, Any]) -> None:
        """List the spec's jobs (new ones `pending`), mark the rest as not in the spec."""
        with self.transaction():
            self.conn.execute("UPDATE jobs SET in_spec = 0")
            for position, job in enumerate(jobs):
                config = job.to_dict()
                self.conn.execute(
                    "INSERT INTO jobs (id, position, task, arch, seed, lr, config) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(id) DO UPDATE SET position = excluded.position, in_spec = 1",
                    (job.job_id(), position, config["task"]["name"], config["arch"]["name"],
                     job.seed, job.train.lr, json.dumps(config, sort_keys=True)),
                )
            for key, value in meta.items():
                self._put_meta(key, value)

    def adopt(self, source: Path, ids: Iterable[str]) -> list[str]:
        """Copy `source`'s finished runs of `ids` onto this database's pending rows of the same
        id (an id is the hash of the resolved config: the same job, trained elsewhere); the
        adopted ids. Rows this database has finished are kept."""
        reader = ResultsDB(source, read_only=True)
        try:
            wanted = set(ids)
            found = [r for r in reader.rows(f"status IN ({', '.join('?' * len(FINISHED))})",
                                            tuple(FINISHED)) if r["id"] in wanted]
        finally:
            reader.close()
        adopted = []
        with self.transaction():
            for r in found:
                cur = self.conn.execute(
                    "UPDATE jobs SET status = ?, steps_to_emergence = ?, steps = ?, "
                    "wall_time_s = ?, steps_per_s = ?, result = ?, versions = ?, error = NULL, "
                    "attempts = ?, worker = ?, started_at = ?, finished_at = ? "
                    "WHERE id = ? AND status = 'pending'",
                    (r["status"], r["steps_to_emergence"], r["steps"], r["wall_time_s"],
                     r["steps_per_s"], r["result"], r["versions"], r["attempts"], r["worker"],
                     r["started_at"], r["finished_at"], r["id"]))
                if cur.rowcount:
                    adopted.append(r["id"])
        return adopted

    def job_ids(self, statuses: tuple[str, ...] | None = None) -> set[str]:
        """Ids of every job listed here (in the spec or not), or of those in `statuses`."""
        return {r["id"] for r in self.rows("1 = 1") if statuses is None or r["status"] in statuses}

    def copy_to(self, path: Path) -> None:
        """A consistent copy of this database (its WAL included) at `path`, through SQLite's
        backup API (what `bench compare` starts from)."""
        with sqlite3.connect(path) as dst:
            self.conn.backup(dst)

    def requeue_running(self) -> int:
        """Rows this sweep left `running` (stopped by Ctrl-C) go back to `pending`."""
        with self.transaction():
            return self.conn.execute("UPDATE jobs SET status = 'pending', worker = NULL "
                                     "WHERE status = 'running'").rowcount

    def requeue_interrupted(self) -> int:
        """Rows left `running` or `failed` by an earlier sweep go back to `pending`."""
        with self.transaction():
            cur = self.conn.execute(
                "UPDATE jobs SET status = 'pending', worker = NULL "
                "WHERE status IN ('running', 'failed') AND in_spec = 1")
            return cur.rowcount

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction():
            self._put_meta(key, value)

    def _put_meta(self, key: str, value: Any) -> None:  # inside a transaction
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default: Any = None) -> Any:
        _, found = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(found[0][0]) if found else default

    # --- the worker's side ---------------------------------------------------------------
    def claim(self, job_id: str) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = ?, "
                "started_at = ?, finished_at = NULL, error = NULL WHERE id = ?",
                (f"{socket.gethostname()}:{os.getpid()}", time.time(), job_id))

    def finish(self, job_id: str, result: dict[str, Any]) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = ?, steps_to_emergence = ?, steps = ?, wall_time_s = ?, "
                "steps_per_s = ?, result = ?, versions = ?, error = NULL, finished_at = ? "
                "WHERE id = ?",
                (result["status"], result["steps_to_emergence"], result["steps"],
                 result["wall_time_s"], result["steps_per_s"], _json(result),
                 _json(result["versions"]), time.time(), job_id))

    def fail(self, job_id: str, error: str, versions: dict[str, str]) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = 'failed', error = ?, versions = ?, finished_at = ? "
                "WHERE id = ?", (error, _json(versions), time.time(), job_id))

    # --- reading -------------------------------------------------------------------------
    def rows(self, where: str = "in_spec = 1", params: tuple = ()) -> list[dict[str, Any]]:
        names, found = self._query(f"SELECT * FROM jobs WHERE {where} ORDER BY position", params)
        return [dict(zip(names, row)) for row in found]

    def _query(self, sql: str, params: tuple = ()) -> tuple[list[str], list[tuple]]:
        """(column names, every row) of a read; a page that does not read back is one line."""
        try:
            cur = self.conn.execute(sql, params)
            return [d[0] for d in cur.description], cur.fetchall()
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None

    def _damaged(self, e: sqlite3.DatabaseError) -> ConfigError:
        """A page that does not read back (a torn copy, garbage written into the file): one
        line, the file left as it is."""
        return ConfigError(f"{self.path}: a damaged results database ({e}); restore it from "
                           "git or a copy (the sweep's finished runs are in it)")

    def results(self) -> list[RunRecord]:
        """The run record of every finished job of the current spec, in spec order."""
        marks = ", ".join("?" * len(FINISHED))
        rows = self.rows(f"in_spec = 1 AND status IN ({marks})", FINISHED)
        try:
            found = [json.loads(r["result"]) for r in rows]
        except (TypeError, ValueError) as e:  # a row whose result is not a run's JSON
            raise self._damaged(sqlite3.DatabaseError(f"a result that is not JSON: {e}")) from None
        try:
            return [RunRecord.from_json(r) for r in found]
        except (TypeError, ValueError) as e:
            raise self._damaged(sqlite3.DatabaseError(f"a result that is not a run record: "
                                                      f"{e}")) from None

    def counts(self) -> dict[str, int]:
        found = dict(self._query(
            "SELECT status, count(*) FROM jobs WHERE in_spec = 1 GROUP BY status")[1])
        return {s: found.get(s, 0) for s in STATUSES}


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): writers queue on the lock, never fail."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _json(data: Any) -> str:
    """JSON that keeps a diverged run's NaN (Python's json reads it back)."""
    return json.dumps(data, default=str, allow_nan=True)


class SweepLock:
    """One live sweep per directory: an OS lock on `out/.lock` (filelock: flock on Unix, msvcrt
    on Windows), released when the process exits or dies. `out/.lock.owner` names the holder."""

    def __init__(self, out: Path):
        self.path = out / ".lock"
        self.lock = FileLock(str(self.path), timeout=0)

    def __enter__(self) -> SweepLock:
        try:
            self.lock.acquire()
        except Timeout:
            owner = self.path.with_suffix(".owner")
            holder = owner.read_text().strip() if owner.exists() else "?"
            raise ConfigError(f"{self.path.parent}: another sweep (pid {holder}) is running "
                              "in this directory") from None
        self.path.with_suffix(".owner").write_text(f"{os.getpid()}\n")
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    @staticmethod
    def held(out: Path) -> bool:
        """Whether a live process holds `out`'s lock (probed by taking it for an instant)."""
        path = out / ".lock"
        if not path.exists():
            return False
        probe = FileLock(str(path), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            return True
        probe.release()
        return False


def check_out_dir(out: Path) -> None:
    """`out` is, or can be created as, a writable directory: checked before anything is written."""
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"--out: {out} cannot be created ({probe} is not a directory)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--out: {out} is not writable ({probe} is read-only)")
    db = out / ResultsDB.FILENAME
    if db.exists():  # refuse a corrupt or foreign database before touching anything
        ResultsDB(db, read_only=True).close()


def read_results(out: Path) -> tuple[dict[str, Any], list[RunRecord]]:
    """The sweep's spec (as last run) and the result of every finished job of that spec."""
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        spec = db.meta("spec", {}) | {"name": db.meta("name", out.name),
                                      "seed_history": db.meta("seed_history", []),
                                      "reused": db.meta("reused", {}),
                                      "arch_defaults": db.meta("arch_defaults", {})}
        return spec, db.results()
    finally:
        db.close()


__all__ = ["FINISHED", "STATUSES", "ResultsDB", "SweepLock", "check_out_dir", "read_results"]
