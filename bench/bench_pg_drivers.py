"""Which PostgreSQL driver for the store: psycopg 3 (synchronous, in the committer's thread, as
the SQLite store runs sqlite3) or asyncpg (on the event loop), on the store's own workload.

A round is one group commit of ``BATCH`` commands, each one event row and one request row, with
one summary upsert per combat touched, in one transaction. ``lookups`` is single-row reads by
primary key (a retried request id found in the database). Reports the median of ``--reps`` of
commands/s and of this process's CPU µs per command (user + system, as the daemon would pay
it; row generation included, the same for every driver).

Needs asyncpg, which Turnkeeper does not depend on: ``pip install asyncpg``.

    python bench/bench_pg_drivers.py --dsn postgresql://postgres@127.0.0.1:5432/DB
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-not-found]
import psycopg

SCHEMA = """
DROP TABLE IF EXISTS bench_events, bench_requests, bench_summaries;
CREATE TABLE bench_events (combat_id text, seq bigint, body bytea, PRIMARY KEY (combat_id, seq));
CREATE TABLE bench_requests (principal text, request_id text, combat_id text, response bytea,
    at double precision, PRIMARY KEY (principal, request_id));
CREATE TABLE bench_summaries (combat_id text PRIMARY KEY, body bytea);
"""
BODY = os.urandom(160)
"""About a command's event or answer, msgpacked."""
COMBATS = 64
INSERT_EVENT = "INSERT INTO bench_events VALUES ({}, {}, {})"
INSERT_REQUEST = "INSERT INTO bench_requests VALUES ({}, {}, {}, {}, {})"
UPSERT_SUMMARIES = (
    "INSERT INTO bench_summaries SELECT * FROM unnest({}::text[], {}::bytea[])"
    " ON CONFLICT (combat_id) DO UPDATE SET body = excluded.body"
)
UNNEST_EVENTS = "INSERT INTO bench_events SELECT * FROM unnest({}::text[], {}::int8[], {}::bytea[])"
UNNEST_REQUESTS = (
    "INSERT INTO bench_requests SELECT * FROM unnest({}::text[], {}::text[], {}::text[],"
    " {}::bytea[], {}::float8[])"
)
LOOKUP = "SELECT combat_id, response FROM bench_requests WHERE principal = {} AND request_id = {}"

Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def rows(batch: int, round_: int) -> Rows:
    events, requests, summaries = [], [], {}
    for i in range(batch):
        combat = f"c{i % COMBATS}"
        events.append((combat, round_ * batch + i + 1, BODY))
        requests.append(("p", str(uuid.uuid4()), combat, BODY, time.time()))
        summaries[combat] = BODY
    return events, requests, list(summaries.items())


def columns(rows_: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [list(c) for c in zip(*rows_, strict=True)]


def psycopg_write(db: psycopg.Connection[Any], way: str, r: Rows) -> None:
    events, requests, summaries = r
    with db.transaction(), db.cursor() as cur:
        if way == "copy":  # the store's way
            with cur.copy("COPY bench_events FROM STDIN (FORMAT BINARY)") as c:
                c.set_types(["text", "int8", "bytea"])
                for row in events:
                    c.write_row(row)
            with cur.copy("COPY bench_requests FROM STDIN (FORMAT BINARY)") as c:
                c.set_types(["text", "text", "text", "bytea", "float8"])
                for row in requests:
                    c.write_row(row)
        else:  # executemany: pipelined by psycopg
            cur.executemany(INSERT_EVENT.format(*["%s"] * 3), events)
            cur.executemany(INSERT_REQUEST.format(*["%s"] * 5), requests)
        cur.execute(UPSERT_SUMMARIES.format("%s", "%s"), columns(summaries))


def psycopg_run(dsn: str, way: str, batch: int, rounds: int, lookups: int) -> tuple[float, float]:
    result: list[tuple[float, float]] = []

    def work() -> None:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(SCHEMA)
            ids = []
            t0, c0 = time.perf_counter(), cpu()
            for r in range(rounds):
                written = rows(batch, r)
                ids.append(written[1][0][1])
                if way == "lookup":
                    # The rows the lookups find, as asyncpg_run stores them: like for like.
                    db.execute(INSERT_REQUEST.format(*["%s"] * 5), written[1][0])
                else:
                    psycopg_write(db, way, written)
            if way == "lookup":
                t0, c0 = time.perf_counter(), cpu()
                for k in range(lookups):
                    db.execute(LOOKUP.format("%s", "%s"), ("p", ids[k % len(ids)])).fetchone()
            result.append((time.perf_counter() - t0, cpu() - c0))

    t = threading.Thread(target=work)  # in a thread, as the store's committer runs it
    t.start()
    t.join()
    return result[0]


async def asyncpg_run(
    dsn: str, way: str, batch: int, rounds: int, lookups: int
) -> tuple[float, float]:
    db = await asyncpg.connect(dsn)
    try:
        await db.execute(SCHEMA)
        ids = []
        dollars = [f"${i}" for i in range(1, 6)]
        t0, c0 = time.perf_counter(), cpu()
        for r in range(rounds):
            events, requests, summaries = rows(batch, r)
            ids.append(requests[0][1])
            if way == "lookup":
                await db.execute(INSERT_REQUEST.format(*dollars), *requests[0])
                continue
            async with db.transaction():
                if way == "unnest":
                    await db.execute(UNNEST_EVENTS.format(*dollars), *columns(events))
                    await db.execute(UNNEST_REQUESTS.format(*dollars), *columns(requests))
                else:
                    await db.executemany(INSERT_EVENT.format(*dollars), events)
                    await db.executemany(INSERT_REQUEST.format(*dollars), requests)
                await db.execute(UPSERT_SUMMARIES.format(*dollars), *columns(summaries))
        if way == "lookup":
            t0, c0 = time.perf_counter(), cpu()
            for k in range(lookups):
                await db.fetchrow(LOOKUP.format(*dollars), "p", ids[k % len(ids)])
        return time.perf_counter() - t0, cpu() - c0
    finally:
        await db.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--lookups", type=int, default=5000)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 128])
    args = p.parse_args()
    runs: dict[str, Callable[[str, int], tuple[float, float]]] = {
        "psycopg executemany": lambda w, b: psycopg_run(args.dsn, w, b, args.rounds, 0),
        "psycopg copy": lambda w, b: psycopg_run(args.dsn, w, b, args.rounds, 0),
        "asyncpg executemany": lambda w, b: asyncio.run(
            asyncpg_run(args.dsn, w, b, args.rounds, 0)
        ),
        "asyncpg unnest": lambda w, b: asyncio.run(asyncpg_run(args.dsn, w, b, args.rounds, 0)),
    }
    print(f"{'driver, way':22} {'batch':>5} {'cmd/s':>8} {'CPU µs/cmd':>10}")
    for batch in args.batches:
        for name, run in runs.items():
            measured = [run(name.split()[1], batch) for _ in range(args.reps)]
            wall = statistics.median(m[0] for m in measured)
            used = statistics.median(m[1] for m in measured)
            n = batch * args.rounds
            print(f"{name:22} {batch:5} {n / wall:8.0f} {used / n * 1e6:10.1f}")
    for name in ("psycopg", "asyncpg"):
        measured = []
        for _ in range(args.reps):
            if name == "psycopg":
                measured.append(psycopg_run(args.dsn, "lookup", 1, 100, args.lookups))
            else:
                measured.append(asyncio.run(asyncpg_run(args.dsn, "lookup", 1, 100, args.lookups)))
        wall = statistics.median(m[0] for m in measured)
        used = statistics.median(m[1] for m in measured)
        print(
            f"{name + ' lookup':22} {'':5} {args.lookups / wall:8.0f}"
            f" {used / args.lookups * 1e6:10.1f}"
        )


if __name__ == "__main__":
    main()
