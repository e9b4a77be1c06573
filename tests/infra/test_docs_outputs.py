"""Every output the docs name is an output of the synthesized stacks (from the real bundle), and
docs/deploy.md's output tables are exactly what the stack and a destination region's stack output
(the example app's: test_installed_package.py). Before: the runbook and the cross-region steps named
document and dashboard outputs that did not exist."""

from __future__ import annotations

import json
import re

from tests.infra.support import DOC_PAGES, FAR_REGION, REPO, CliSynth, documented_outputs, output_mentions


def _outputs(template: dict[str, object]) -> set[str]:
    # Fn::GetStackOutput's own outputs are plumbing, not for operators.
    return {k for k in template.get("Outputs", {}) if not k.startswith("PublishOutput")}  # type: ignore[union-attr]


def test_deploy_md_lists_exactly_the_outputs_of_both_stacks(
    cli_single: CliSynth, cli_two_regions: CliSynth
) -> None:
    home, region = documented_outputs()
    assert home == _outputs(cli_single.templates["CacheWarm"])
    assert home == _outputs(cli_two_regions.templates["CacheWarm"])
    assert region == _outputs(cli_two_regions.templates[f"CacheWarm-{FAR_REGION}"])


def test_every_output_a_page_names_exists(cli_single: CliSynth, cli_two_regions: CliSynth) -> None:
    real = _outputs(cli_single.templates["CacheWarm"]) | _outputs(
        cli_two_regions.templates[f"CacheWarm-{FAR_REGION}"]
    )
    mentions = output_mentions()
    assert "docs/runbook.md" in mentions and "README.md" in mentions  # the pattern finds them
    wrong = {page: sorted(names - real) for page, names in mentions.items() if names - real}
    assert not wrong, wrong


def test_every_output_shaped_name_in_the_docs_is_an_output_or_something_else_the_stack_has(
    cli_single: CliSynth,
) -> None:
    """A name in backticks that looks like an output (…Arn, …Name, …Id, …Url, …Version, …LogGroup) is
    an output, a parameter, a state of the state machine or the metrics' warm-id dimension — never a
    name that exists nowhere."""
    from cachewarm_infra.observability import WARM_ID

    template = cli_single.templates["CacheWarm"]
    states = set(json.loads((REPO / "statemachine" / "warm.asl.json").read_text())["States"])
    known = _outputs(template) | set(template["Parameters"]) | states | {WARM_ID}
    shaped = re.compile(r"`([A-Z][A-Za-z0-9]*(?:Arn|Name|Id|Ids|Url|Version|LogGroup))`")
    unknown = {
        page.relative_to(REPO).as_posix(): sorted(set(shaped.findall(page.read_text())) - known)
        for page in DOC_PAGES
    }
    assert not {p: n for p, n in unknown.items() if n}, unknown
