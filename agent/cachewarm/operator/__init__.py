"""The operator's commands: `cachewarm start`, `cachewarm status`, `cachewarm watch`.

They read what the platform already has: the Step Functions execution (input, status, history) and
the agents' status objects in the status bucket (found from the state machine's
`cachewarm:status-bucket` tag, or `--status-bucket`). Logic is plain functions over boto3 clients
passed in, so tests run them against moto.

- `aws`: reading an execution and its status objects into a `WarmView`; starting an execution.
- `view`: what is shown — `WarmView`/`NodeView`, the status table, the progress bars.
- `commands`: the click commands.
"""
