"""The daemon's transport and session layers.

Each layer wraps exactly the one below, and knows nothing above it:

- ``channel``: bytes ⇄ messages on an ``asyncio`` transport, one class per transport (Unix, TCP;
  WebSocket in ``websocket``). Replies and events are written straight to the transport, with
  its buffer bounded per peer.
- ``session``: hello, credentials, language, subscriptions, and the method table, with the one
  place where a request's failure becomes a wire error.
- ``listeners``: the connection limits (admission) and the listening sockets.

The composition root that plugs them to the combats and the store is ``turnkeeper.app``.
"""
