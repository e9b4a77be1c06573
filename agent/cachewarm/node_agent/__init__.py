"""The node agent: what the SSM documents run on instances (`cachewarm agent dump|populate`).

On a source node it formats and mounts the shared io2 volume read-write and runs `cachewarm-dump`;
on a populator it mounts the same volume `ro,norecovery` and runs the populator loop. Both publish a
status object (heartbeat, progress, done/failed) to S3 that the controller's CheckProgress reads, and
both resume when run again.
"""

from cachewarm.node_agent.errors import AgentError, ExitCode

__all__ = ["AgentError", "ExitCode"]
