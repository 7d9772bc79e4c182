"""The combats a daemon holds: one writer per combat, durable before acknowledged.

A command takes the write pipeline every host shares (``turnkeeper_engine.pipeline``): request
→ room for its hooks → plugins' before hooks → engine → events committed (group commit) →
subscribers → reply → plugins' hooks, in the background, in each combat's event order. Once a
command is committed nothing waits on a plugin before its reply.

The package's rooms, each importing only those below it (an import-linter contract keeps it
so): ``hub`` (the facade) → ``clock`` → ``writer`` (idempotency and the pipeline's ports) →
``hooks``, ``fanout`` (the one subscription registry) and ``queries`` → ``follow`` (reading combats
another daemon holds) → ``rebuild`` →
``registry`` → ``deadlines`` → ``telling`` and ``combat`` → ``errors``.
"""

from .errors import RequestError
from .hub import Hub, tune_collector

__all__ = ["Hub", "RequestError", "tune_collector"]
