"""The controller's steps: plain typed functions over injected AWS clients/interfaces.

One module per group of states of `statemachine/warm.asl.json`:

- `planning`: ValidateInput, Plan
- `resources`: CreateVolumes, CheckVolumes, LaunchPopulators, CheckPopulators, AttachVolumes
- `agent_commands`: StartAgents (and the re-sends with which CheckProgress revives an agent)
- `progress`: CheckProgress, Verify
- `teardown`: Teardown (both state machines)

`inventory` finds what exists in EC2 (a warm's tagged resources, the source and destination
replicas' nodes); `common` holds what every step shares (`Deps`, `Settings`, the plan, backoff).

Every step is idempotent (a Retry or a re-run converges instead of duplicating): resources are
found by their warm-id/node tags before anything is created, and EC2 calls carry ClientTokens
derived from warm id + node. Per-node work happens here, inside one call per step, so the state
machine's history grows with the number of polls, not with the number of nodes.
"""
