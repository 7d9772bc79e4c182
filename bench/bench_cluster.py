"""Many daemons on one PostgreSQL (issue 12, part 4): durable commands/s, p99 and CPU per command
with 1, 2 and 3 daemons on one database beside the single SQLite daemon, in the same repetition;
the same with every command sent to a random daemon (each one moving its combat); the cost of one
ownership move; and the failover time after ``kill -9`` of a combat's owner.

    python bench/bench_cluster.py --seconds 3 --reps 3 --failovers 5

**Commands.** The workload of ``bench_commands.py``: ``--connections`` clients, each on its own
combat, alternating ``apply_condition`` and ``remove_condition`` (two events each, a unique
request id), in a closed loop. With *k* daemons (each its own data directory and socket, all
``--store`` on one fresh database per *k*), client *i* talks to daemon *i mod k*, where it made
its combat, so every combat stays where it is (as behind a load balancer that hashes by table).
*Random* does the same on the largest *k* with each client connected to every daemon and each
command sent to one of them at random: most commands then move their combat (a daemon holds a
combat at least 0.5 s before letting it go). A command refused with ``combat_moved`` or
``store_unavailable`` is sent again with its request id, as a client would; those retries are
counted. CPU is read from ``/proc``: the daemons' summed, and the database's sessions'
(``tkbench.PostgresDatabase.cpu_seconds``: the server's shared processes, its WAL writer and
checkpointer, are not counted), each per answered command; ratios are to the SQLite daemon of
the same repetition.

**A move.** Two daemons A and B on the database of the largest *k*; ``--move-combats`` combats
made on A. Rounds alternate: *stay* sends one command per combat, one after the other, to the
daemon that holds it; *move* sends it to the other one, which asks the holder to let go,
acquires the lease and loads the combat. Each round waits until the last move round ended
0.6 s before (the holder's minimum hold is 0.5 s), so a move never waits for it. A move's cost
is its command's latency and the CPU (both daemons and the database's sessions) a move round
spends per command beyond a stay round's.

**Failover.** Two daemons with ``--lease-seconds`` (the daemons' default when not given); each
trial makes ``--failover-combats`` combats on one, commands each there, kills it with SIGKILL
and at once sends a command for every one of them to the other: the time from the kill to the
first and to the last answer. The killed daemon is started again before the next trial, whose
combats are on the other one.

**Idle leases.** A daemon (a second one beside it on the database, as in a cluster) idle for
``--idle-seconds``, holding no combat, then ``--held`` combats it made: what holding a lease
costs while nothing happens (each renewal names every combat held).

Needs a PostgreSQL server on this machine (``--pg-server``, by default ``postgres@127.0.0.1:5432``
without a password); each database made is dropped after its use.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

MOVE_HOLD = 0.6
"""Seconds between a move round's end and the next round: past the holder's 0.5 s minimum hold
(``MIN_HOLD`` in ``turnkeeper/stores/postgresql.py``), so a move never waits for it."""
MOVE_PAIRS = 2
"""Stay and move rounds per repetition, each pair alternating."""
RETRIED = frozenset({"combat_moved", "store_unavailable"})
"""Errors a client answers by sending the same request again (protocol.md: both are transient)."""
HOLD_CONNECTIONS = 50
"""Connections making the combats a daemon holds while idle (``--held``)."""
MAX_RETRIES = 20
"""Retries of one command before the benchmark gives up on it: more means a stuck cluster."""


class Client:
    """One client of a combat, connected to one daemon (sticky) or to several, sending each
    command to one of them at random; a transient refusal is retried with the same request."""

    def __init__(self, conns: list[tk.Conn], rng: random.Random) -> None:
        self.conns = conns
        self.rng = rng
        self.retries = 0

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        for _ in range(MAX_RETRIES):
            conn = self.conns[0] if len(self.conns) == 1 else self.rng.choice(self.conns)
            try:
                return await conn.call(method, params)
            except tk.CallError as error:
                if error.code not in RETRIED:
                    raise
                self.retries += 1
        raise RuntimeError(f"{method} still refused after {MAX_RETRIES} retries")


def _worker(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_work, spec, ready)


async def _work(spec: dict[str, Any], ready: Any) -> Any:
    """Open the clients, each with its combat made on its home daemon, then run the loop;
    return the loop's latencies and CPU, and the retries."""
    paths = [Path(p) for p in spec["sockets"]]
    n, tag = spec["conns"], spec["tag"]
    rng = random.Random(tag)
    if spec["random"]:
        # Every client on every daemon; its first connection, to its home, makes its combat.
        opened = [await tk.open_many(path, n) for path in paths]
        clients = [
            Client([opened[(i + d) % len(paths)][i] for d in range(len(paths))], rng)
            for i in range(n)
        ]
    else:
        counts = tk.split(n, len(paths))
        opened = [await tk.open_many(path, k) for path, k in zip(paths, counts, strict=True)]
        clients = [Client([conn], rng) for conns in opened for conn in conns]
    combats = {id(c): f"{tag}-{i}" for i, c in enumerate(clients)}
    for client in clients:
        await tk.condition_combat(client.conns[0], combats[id(client)])
    await anyio.to_thread.run_sync(ready)
    call = tk.condition_calls(combats)
    latencies, cpu = await tk.closed_loop(clients, call, spec["warmup"], spec["seconds"])
    for conns in opened:
        for conn in conns:
            await conn.aclose()
    return latencies, cpu, sum(c.retries for c in clients)


def _commands(
    servers: list[tk.Server],
    database: tk.PostgresDatabase | None,
    tag: str,
    args: Any,
    *,
    spread: bool = False,
) -> tk.LoopFigures:
    """One closed-loop run against ``servers``: sticky clients, or ``spread`` over them all."""
    specs = [
        {
            "sockets": [str(s.socket_path) for s in servers],
            "conns": n,
            "tag": f"{tag}-w{i}",
            "random": spread,
            "warmup": args.warmup,
            "seconds": args.seconds,
        }
        for i, n in enumerate(tk.split(args.connections, args.procs))
    ]
    return tk.measure_loop(
        servers,
        _worker,
        specs,
        args.warmup,
        args.seconds,
        store_cpu=database.cpu_seconds if database else None,
    )


# ------------------------------------------------------------------------------------ moves


async def _moves(
    a: tk.Server, b: tk.Server, database: tk.PostgresDatabase, combats: int, tag: str
) -> dict[str, tuple[list[float], float, float, int]]:
    """Stay and move rounds (module docstring); per kind: latencies (ms), daemons' CPU s,
    database sessions' CPU s, commands."""
    daemons = (a, b)
    clients = [Client([await tk.Conn.open(s.socket_path)], random.Random(0)) for s in daemons]
    names = [f"{tag}-m{i}" for i in range(combats)]
    for name in names:
        await tk.condition_combat(clients[0].conns[0], name)
    holder = dict.fromkeys(names, 0)
    out: dict[str, tuple[list[float], float, float, int]] = {}
    moved_at = time.perf_counter()
    sent = 0
    for _ in range(MOVE_PAIRS):
        for kind in ("stay", "move"):
            await anyio.sleep(max(0.0, moved_at + MOVE_HOLD - time.perf_counter()))
            latencies: list[float] = []
            cpu_before = sum(s.cpu_seconds() for s in daemons)
            store_before = database.cpu_seconds()
            for name in names:
                to = holder[name] if kind == "stay" else 1 - holder[name]
                sent += 1
                started = time.perf_counter()
                await clients[to].call(
                    "apply_condition",
                    {
                        "combat": name,
                        "request_id": f"{name}-{sent}",
                        "target": "k",
                        "type": "custom",
                    },
                )
                latencies.append((time.perf_counter() - started) * 1000)
                holder[name] = to
            cpu = sum(s.cpu_seconds() for s in daemons) - cpu_before
            store = database.cpu_seconds() - store_before
            if kind == "move":
                moved_at = time.perf_counter()
            was = out.get(kind, ([], 0.0, 0.0, 0))
            out[kind] = (was[0] + latencies, was[1] + cpu, was[2] + store, was[3] + len(names))
    if clients[0].retries or clients[1].retries:
        print(f"  (moves: {clients[0].retries + clients[1].retries} retries)")
    for client in clients:
        await client.conns[0].aclose()
    return out


# --------------------------------------------------------------------------------- failover


async def _failover(
    victim: tk.Server, survivor: tk.Server, combats: int, tag: str, lease: float
) -> tuple[float, float]:
    """Kill ``victim`` holding ``combats`` combats; seconds from the kill to the survivor's
    first and last answer for them."""
    owner = await tk.Conn.open(victim.socket_path)
    names = [f"{tag}-{i}" for i in range(combats)]
    for name in names:
        await tk.condition_combat(owner, name)
    # One connection per combat: a Conn runs one call at a time, and all are sent at once.
    conns = await tk.open_many(survivor.socket_path, combats)
    # A random phase against the victim's renewals (four per lease), as a crash would have.
    await anyio.sleep(random.uniform(0.0, lease / 4))
    killed = time.perf_counter()
    victim.kill()
    answered: list[float] = []

    async def ask(conn: tk.Conn, name: str) -> None:
        await Client([conn], random.Random(0)).call(
            "apply_condition",
            {"combat": name, "request_id": f"{name}-after", "target": "k", "type": "custom"},
        )
        answered.append(time.perf_counter() - killed)

    async with anyio.create_task_group() as tg:
        for conn, name in zip(conns, names, strict=True):
            tg.start_soon(ask, conn, name)
    for conn in conns:
        await conn.aclose()
    with anyio.move_on_after(1):
        await owner.aclose()
    return min(answered), max(answered)


# ------------------------------------------------------------------------------------ leases


async def _make_many(server: tk.Server, combats: int, tag: str) -> None:
    """``combats`` empty combats on ``server``, made over ``HOLD_CONNECTIONS`` connections."""
    conns = await tk.open_many(server.socket_path, HOLD_CONNECTIONS)

    async def make(conn: tk.Conn, names: range) -> None:
        for i in names:
            combat = f"{tag}-{i}"
            await conn.call(
                "create_combat",
                {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"},
            )

    async with anyio.create_task_group() as tg:
        for j, conn in enumerate(conns):
            tg.start_soon(make, conn, range(j, combats, HOLD_CONNECTIONS))
    for conn in conns:
        await conn.aclose()


def _idle(server: tk.Server, database: tk.PostgresDatabase, seconds: float) -> tuple[float, float]:
    """Cores the idle daemon and the database's sessions use over ``seconds``."""
    cpu, store = server.cpu_seconds(), database.cpu_seconds()
    time.sleep(seconds)
    return (server.cpu_seconds() - cpu) / seconds, (database.cpu_seconds() - store) / seconds


def _holding(args: Any, lease_args: list[str]) -> list[tuple[float, float]]:
    """Idle CPU of a daemon (and the database) holding no combat, then ``--held`` combats: what
    a held lease costs while nothing happens (its renewals). A second daemon runs on the
    database, as in a cluster."""
    root = tk.workdir("cluster-held")
    database = tk.PostgresDatabase(args.pg_server)
    servers: list[tk.Server] = []
    try:
        for i in range(2):
            servers.append(tk.daemon(root / f"d{i}", "--store", database.dsn, *lease_args).start())
        time.sleep(1)
        empty = _idle(servers[0], database, args.idle_seconds)
        anyio.run(_make_many, servers[0], args.held, "held")
        time.sleep(1)
        held = _idle(servers[0], database, args.idle_seconds)
    finally:
        for server in servers:
            server.stop()
        database.drop()
    for label, (cpu, store) in (("none", empty), (f"{args.held:,}", held)):
        print(f"idle, holding {label}: daemon {cpu:.3f} cores, PostgreSQL {store:.3f}", flush=True)
    return [empty, held]


# ------------------------------------------------------------------------------------- main


def main() -> None:
    parser = tk.command_load_parser("many daemons on one PostgreSQL: commands, moves, failover")
    parser.set_defaults(seconds=3.0)
    parser.add_argument("--procs", type=int, default=1, help="client processes")
    parser.add_argument(
        "--daemons", type=int, nargs="+", default=[1, 2, 3], help="cluster sizes to measure"
    )
    parser.add_argument("--move-combats", type=int, default=50, help="combats moved per round")
    parser.add_argument("--failovers", type=int, default=5, help="kill -9 trials (after the reps)")
    parser.add_argument("--failover-combats", type=int, default=20, help="combats the victim holds")
    parser.add_argument("--held", type=int, default=5000, help="combats an idle daemon holds")
    parser.add_argument("--idle-seconds", type=float, default=4.0, help="idle CPU window")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=None,
        help="the daemons' --lease-seconds (default: the daemons' own)",
    )
    parser.add_argument(
        "--pg-server",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a local PostgreSQL server's maintenance database",
    )
    args = parser.parse_args()
    print(tk.machine(), flush=True)
    lease_args = ["--lease-seconds", f"{args.lease_seconds:g}"] if args.lease_seconds else []
    biggest = max(args.daemons)
    names = ["sqlite", *(f"postgresql x{k}" for k in args.daemons)]
    if biggest >= 2:
        names.append(f"postgresql x{biggest} random")
    runs: dict[str, list[tk.LoopFigures]] = {name: [] for name in names}
    moves: list[dict[str, tuple[list[float], float, float, int]]] = []
    for rep in range(args.reps):
        root = tk.workdir(f"cluster-{rep}")
        sqlite = tk.daemon(root / "sqlite").start()
        try:
            runs["sqlite"].append(_commands([sqlite], None, f"r{rep}-sqlite", args))
        finally:
            sqlite.stop()
        _show(rep, "sqlite", runs["sqlite"][-1])
        for k in args.daemons:
            database = tk.PostgresDatabase(args.pg_server)
            servers: list[tk.Server] = []
            try:
                for i in range(k):
                    extra = ["--store", database.dsn, *lease_args]
                    servers.append(tk.daemon(root / f"pg{k}-{i}", *extra).start())
                name = f"postgresql x{k}"
                runs[name].append(_commands(servers, database, f"r{rep}-x{k}", args))
                _show(rep, name, runs[name][-1])
                if k == biggest >= 2:
                    name = f"postgresql x{k} random"
                    figures = _commands(servers, database, f"r{rep}-rnd", args, spread=True)
                    runs[name].append(figures)
                    _show(rep, name, figures)
                    moves.append(
                        anyio.run(
                            _moves, servers[0], servers[1], database, args.move_combats, f"r{rep}"
                        )
                    )
                    _show_moves(rep, moves[-1])
            finally:
                for server in servers:
                    server.stop()
                database.drop()
    failovers = _failovers(args, lease_args)
    holding = _holding(args, lease_args) if args.held > 0 else []
    _report(args, names, runs, moves, failovers, holding)


def _failovers(args: Any, lease_args: list[str]) -> list[tuple[float, float]]:
    if args.failovers <= 0:
        return []
    root = tk.workdir("cluster-failover")
    database = tk.PostgresDatabase(args.pg_server)
    servers: list[tk.Server] = []
    lease = args.lease_seconds or 3.0
    out: list[tuple[float, float]] = []
    try:
        for i in range(2):
            extra = ["--store", database.dsn, *lease_args]
            servers.append(tk.daemon(root / f"d{i}", *extra).start())
        for trial in range(args.failovers):
            victim, survivor = servers[trial % 2], servers[1 - trial % 2]
            first, last = anyio.run(
                _failover, victim, survivor, args.failover_combats, f"f{trial}", lease
            )
            out.append((first, last))
            print(f"failover {trial}: first answer {first:.2f} s, last {last:.2f} s", flush=True)
            victim.start()
    finally:
        for server in servers:
            server.stop()
        database.drop()
    return out


def _show(rep: int, name: str, f: tk.LoopFigures) -> None:
    retries = sum(e[0] for e in f.extra)
    print(
        f"rep {rep} {name:22} {f.calls_per_s:7.0f}/s p50={f.p50_ms:.1f} ms p99={f.p99_ms:.1f} ms"
        f" daemons={f.server_cpu:.2f} ({f.cpu_us_per_call:.0f} µs/call)"
        f" pg={f.store_cpu:.2f} ({f.store_cpu_us_per_call:.0f} µs/call)"
        f" client={f.client_cpu:.2f}" + (f" retries={retries}" if retries else ""),
        flush=True,
    )


def _show_moves(rep: int, m: dict[str, tuple[list[float], float, float, int]]) -> None:
    for kind, (lat, cpu, store, n) in m.items():
        print(
            f"rep {rep} {kind:5} x{n}: p50={tk.percentile(lat, 50):.1f} ms"
            f" max={max(lat):.1f} ms daemons {cpu / n * 1e6:.0f} µs/command"
            f" pg {store / n * 1e6:.0f} µs/command",
            flush=True,
        )


def _report(
    args: Any,
    names: list[str],
    runs: dict[str, list[tk.LoopFigures]],
    moves: list[dict[str, tuple[list[float], float, float, int]]],
    failovers: list[tuple[float, float]],
    holding: list[tuple[float, float]],
) -> None:
    print(
        f"\n{args.connections} connections, {args.seconds:g} s windows;"
        f" medians of {args.reps} repetitions; ratios to the SQLite daemon of the same repetition\n"
    )
    base = runs["sqlite"]
    rows = []
    for name in names:
        d = runs[name]
        rate = [f.calls_per_s / s.calls_per_s for f, s in zip(d, base, strict=True)]
        cpu = [f.cpu_us_per_call / s.cpu_us_per_call for f, s in zip(d, base, strict=True)]
        rows.append(
            [
                name,
                tk.fmt(tk.median([f.calls_per_s for f in d]), 0),
                f"{tk.median(rate):.2f}",
                tk.fmt(tk.median([f.p99_ms for f in d]), 1),
                tk.fmt(tk.median([f.cpu_us_per_call for f in d]), 0),
                f"{tk.median(cpu):.2f}",
                tk.fmt(tk.median([f.store_cpu_us_per_call for f in d]), 0)
                if d[0].store_cpu
                else "",
                f"{tk.median([f.server_cpu for f in d]):.2f}",
                f"{tk.median([f.store_cpu for f in d]):.2f}" if d[0].store_cpu else "",
                f"{tk.median([f.client_cpu for f in d]):.2f}",
                str(sum(e[0] for f in d for e in f.extra)),
            ]
        )
    print(
        tk.table(
            [
                "daemons",
                "commands/s",
                "rate / SQLite",
                "p99 ms",
                "daemons' CPU µs/cmd",
                "CPU / SQLite",
                "PostgreSQL sessions' CPU µs/cmd",
                "daemons (cores)",
                "PostgreSQL (cores)",
                "client (cores)",
                "retries",
            ],
            rows,
        )
    )
    if moves:
        print(
            f"\nOwnership moves: {args.move_combats} combats, {MOVE_PAIRS} rounds of each kind"
            f" per repetition; medians of the repetitions\n"
        )
        rows = []
        for kind in ("stay", "move"):
            rows.append(
                [
                    kind,
                    tk.fmt(tk.median([tk.percentile(m[kind][0], 50) for m in moves]), 1),
                    tk.fmt(tk.median([tk.percentile(m[kind][0], 99) for m in moves]), 1),
                    tk.fmt(tk.median([m[kind][1] / m[kind][3] * 1e6 for m in moves]), 0),
                    tk.fmt(tk.median([m[kind][2] / m[kind][3] * 1e6 for m in moves]), 0),
                ]
            )
        print(
            tk.table(
                ["command", "p50 ms", "p99 ms", "daemons' CPU µs/cmd", "PostgreSQL CPU µs/cmd"],
                rows,
            )
        )
    if failovers:
        firsts = [f for f, _ in failovers]
        lasts = [last for _, last in failovers]
        print(
            f"\nFailover ({len(failovers)} kill -9 trials, {args.failover_combats} combats each,"
            f" lease {args.lease_seconds or 'default'}): first answer median"
            f" {tk.median(firsts):.2f} s (min {min(firsts):.2f}, max {max(firsts):.2f}),"
            f" last answer median {tk.median(lasts):.2f} s (max {max(lasts):.2f})"
        )

    if holding:
        (cpu0, pg0), (cpu1, pg1) = holding
        print(
            f"\nIdle, a daemon holding {args.held:,} combats ({args.idle_seconds:g} s, one run):"
            f" daemon {cpu1:.3f} cores (holding none: {cpu0:.3f}), its database's sessions"
            f" {pg1:.3f} (none: {pg0:.3f}); per held combat"
            f" {(cpu1 - cpu0) / args.held * 1e6:.2f} µs/s daemon,"
            f" {(pg1 - pg0) / args.held * 1e6:.2f} µs/s PostgreSQL"
        )


if __name__ == "__main__":
    main()
