"""The `cachewarm` command line: one click group; each area registers its commands here."""

from __future__ import annotations

import click

from cachewarm import __version__
from cachewarm.exitcodes import ExitCode, epilog
from cachewarm.stdio import survive_closed_outputs


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=epilog(*ExitCode) + "\n\nEach command's --help lists its own; docs/exit-codes.md.",
)
@click.version_option(__version__, prog_name="cachewarm")
def main() -> None:
    """Warm a new memcached replica from an existing one."""


def run() -> None:
    """The console entry point (`cachewarm`, `python -m cachewarm`): main() with a stdout and stderr
    that outlive their reader (`cachewarm warm --json | head -1`; cachewarm.stdio)."""
    survive_closed_outputs()
    main()


# Each area adds one line below: `main.add_command(<its click command or group>)`.
from cachewarm.datapath.commands import demo_cmd, populate_cmd, verify_cmd  # noqa: E402
from cachewarm.datapath.warm_command import warm_cmd  # noqa: E402

main.add_command(populate_cmd)
main.add_command(warm_cmd)
main.add_command(verify_cmd)
main.add_command(demo_cmd)
from cachewarm.node_agent.cli import agent_group  # noqa: E402

main.add_command(agent_group)
from cachewarm.operator.commands import list_cmd, start_cmd, status_cmd, stop_cmd, watch_cmd  # noqa: E402

main.add_command(start_cmd)
main.add_command(list_cmd)
main.add_command(status_cmd)
main.add_command(watch_cmd)
main.add_command(stop_cmd)
