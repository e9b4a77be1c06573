"""The agreements between cachewarm's processes, each written down once.

Imported by the agent (node agent, operator CLI), the controller's Lambdas (this package is bundled
into their asset) and the CDK construct, so a change to an agreement is a change here. Standard
library only: the Lambda asset carries this package and nothing else of the agent.

- `status`: the status object the agents write and the controller and operator read; its S3 layout.
- `inputs`: the patterns, limits and defaults of every value that crosses a process boundary
  (execution input, SSM document parameters, agent flags).
- `tags`: the names of the tags on what the stack and the controller create.
- `warm_ids`: the warm id of an execution started by an Auto Scaling launch (derived by the
  controller, derived again by the operator CLI).

Tests (`tests/contract/`) fail when the SSM documents, `statemachine/input.schema.json` or the agent's
CLI disagree with this package.
"""
