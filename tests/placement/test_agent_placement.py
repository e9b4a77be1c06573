"""`cachewarm agent populate|stream|verify --placement` (the AWS path: the controller's
`populator.placement`): the file-free schemes, refused as usage errors when they do not fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarm.contract import inputs
from cachewarm.datapath.nodes import parse_nodes
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import placement_spec
from cachewarm.node_agent.stream import StreamJob


def test_evcache_is_the_default_and_needs_no_spec() -> None:
    assert inputs.DEFAULT_PLACEMENT == "evcache"
    assert placement_spec("evcache", parse_nodes("10.0.0.1:11211")) is None


def test_a_scheme_is_checked_against_the_destinations() -> None:
    spec = placement_spec("libmemcached,distribution=ketama", parse_nodes("10.0.0.1:11211,10.0.0.2:11211"))
    assert spec is not None and spec.scheme == "libmemcached"
    with pytest.raises(AgentError) as e:
        placement_spec("libmemcached,distribution=maglev", parse_nodes("10.0.0.1:11211"))
    assert e.value.code == ExitCode.USAGE and "distribution 'maglev'" in str(e.value)


def test_the_stream_agent_hands_the_dumper_the_description(tmp_path: Path) -> None:
    job = StreamJob(
        warm_id="warm-1",
        node_id="i-0123456789abcdef0",
        memcached_host="127.0.0.1",
        memcached_port=11211,
        destinations="10.0.0.1:11211,10.0.0.2:11211",
        dumper="/bin/true",
        state_dir=tmp_path,
        placement="gomemcache",
    )
    argv = job.argv()
    desc = argv[argv.index("--placement-description") + 1]
    assert desc.startswith("dist modula\nhash crc32a\n") and desc.count("\nnode ") == 2
    assert "--node-key-format" not in argv
    plain = StreamJob(**{**job.__dict__, "placement": "evcache"}).argv()
    assert "--placement-description" not in plain and "--node-key-format" in plain
