"""The async client's timing, buffer and page constants: every wait it makes is bounded by one
of these, except waiting for the next event."""

from __future__ import annotations

CALL_TIMEOUT = 30.0
"""Seconds a request waits for its answer on an open connection. The daemon answers requests in
order and gives a reply up to 30 s to be queued (its ``SEND_TIMEOUT``); a longer silence means
something is wrong, and the caller hears of it (:class:`CallTimeoutError`)."""

RECONNECT_TIMEOUT = 30.0
"""Seconds the client keeps trying to reconnect after a drop before it gives up
(:class:`ConnectionLost`): a restarted daemon listens again within a second or two, so this
leaves room for a slow restart while a daemon that is gone for good is reported in bounded time."""

CONNECT_TIMEOUT = 10.0
"""Seconds one connection attempt may take: a local socket connects at once, and a silent TCP
host must not use up the whole reconnect budget in a single try."""

SEND_TIMEOUT = 10.0
"""Seconds one message may take to be written. The daemon reads requests as they come, so a
write that makes no progress this long means it stopped reading: the connection is dropped and
brought back."""

CLOSE_TIMEOUT = 5.0
"""Seconds cleanup may take (an unsubscribe when a subscription is left, closing a socket). It is
shielded from cancellation, so a cancelled caller still leaves the session tidy, and bounded, so
it never holds that caller up for long."""

BACKOFF_FIRST = 0.05
"""First pause between reconnect attempts: a restarted daemon listens within a fraction of a
second, so the first retries come quickly."""

BACKOFF_MAX = 2.0
"""Longest pause between reconnect attempts (the pause doubles up to it): a daemon that is down
for a while is tried every couple of seconds, not in a tight loop. Each pause is randomly
shortened by up to half so that the clients of a restarted daemon do not return in lockstep."""

MAX_SENDS = 5
"""Times one request is sent, each on a fresh connection after the last one dropped before the
answer came. A request that outlives this many connections is more likely what breaks them than
unlucky: its caller gets :class:`ConnectionLost` instead of an endless retry loop."""

EVENT_BUFFER = 1024
"""Unread events one subscription holds. The daemon queues at most 1024 messages for a
connection (``OUTBOX_MESSAGES``) and drops one that falls further behind, so a larger buffer
would not help a slow consumer; it also holds a whole catch-up (at most 1000 events)."""

FALLBACK_HISTORY_PAGE = 100
"""``history`` page size when a daemon's hello names none: within every daemon's bound."""

FALLBACK_COMBAT_PAGE = 100
"""``list_combats`` page size when a daemon's hello names none: within every daemon's bound."""

RECV_BYTES = 65536
"""Bytes read per receive: a typical reply or burst of events in one system call."""
