"""The node agent's command line (`cachewarm agent dump|populate`) agrees with the contract and with
the SSM documents that run it.

- Every agent flag that carries an SSM document parameter accepts exactly what the contract
  (`cachewarm.contract.inputs`) allows for that parameter — edge cases included (longest value, one
  character more, a trailing newline, shell metacharacters) — with the documented differences only:
  `--device` takes any block device (`DEVICE`, a superset of the documents' `EBS_DEVICE`), `--threads`
  stops at the dumper's `THREADS_MAX`, and `--max-items-per-second` / `--max-bytes-per-second` start
  at 1 (the documents drop the flag for 0 = unlimited).
- Each document's `runCommand`, run by bash with a stand-in `cachewarm`, passes only flags the agent
  has, and the agent reads back the values the document was given.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
from cachewarm.contract import inputs
from cachewarm.node_agent.cli import agent_group

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = {
    "dump": REPO / "infra/ssm_documents/dump-agent.json",
    "populate": REPO / "infra/ssm_documents/populate-agent.json",
    "verify": REPO / "infra/ssm_documents/verify-agent.json",
}

# Agent flag -> the SSM document parameter it carries.
FLAG_PARAM = {
    "--warm-id": "warmId",
    "--node-id": "nodeId",
    "--device": "device",
    "--mount": "mount",
    "--status-bucket": "statusBucket",
    "--status-prefix": "statusPrefix",
    "--memcached": "memcached",
    "--to": "to",
    "--mode": "mode",
    "--threads": "threads",
    "--max-items-per-second": "maxItemsPerSecond",
    "--max-bytes-per-second": "maxBytesPerSecond",
    "--adaptive": "adaptive",
    "--order": "order",
    "--crawl-sleep-us": "crawlSleepUs",
    "--source": "source",
    "--sample": "sampleKeys",
    "--placement": "placement",
    "--to-s3": "toS3",
    "--from-s3": "fromS3",
    "--s3-region": "s3Region",
    "--upload-rate": "uploadRate",
}
# Document parameters that are not passed to the agent as they are: SSM's own run time limit, the
# version the document checks `cachewarm --version` against before it starts the agent (filled in by
# the stack), and the populate document's recheckSource, which its script turns into `--source` or,
# when it is `none`, `--accept-no-recheck` (test_the_populate_document_passes_the_recheck_source).
SSM_ONLY = {"executionTimeout", "agentVersion", "recheckSource"}
VERSION = "0.1.0"

EBS_DEVICE = inputs.ebs_device_path("vol-0123456789abcdef0")
ARN_A = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"
ARN_B = "arn:aws:ec2:eu-west-2:123456789012:instance/i-0fedcba9876543210"
ARN_GOV = "arn:aws-us-gov:ec2:us-gov-west-1:123456789012:instance/i-01234567"
HOST_MAX = "h" * 253
ENDPOINTS_MAX = ",".join(f"10.0.{i // 256}.{i % 256}:11211" for i in range(inputs.MAX_ENDPOINTS))
# Shell metacharacters and line breaks: wrapped around a valid value, each must be refused.
HOSTILE = ["{v};id", "$({v})", "`{v}`", "{v}|id", "{v}&&id", "{v}\n", "{v}\nid", "{v} x", "'{v}'", '"{v}"']

# Per document parameter: values the contract allows, values it does not. The hostile variants of
# the first valid value are added below.
SAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "warmId": (
        ["warm-1", "abc", "warm-2026-11-22", "w" * inputs.WARM_ID_MAX],
        ["w" * (inputs.WARM_ID_MAX + 1), "ab", "Warm-1", "-warm", "warm_1", "warm.1", ""],
    ),
    "nodeId": (
        ["i-0123456789abcdef0", "i-01234567", "i-" + "f" * 17],
        ["i-" + "f" * 18, "i-0123456", "i-0123456789ABCDEF0", "n-1", "10.0.0.1", ""],
    ),
    "device": (
        [EBS_DEVICE, "/dev/loop0", "/dev/xvdf", "/dev/" + "a" * 201],
        ["/dev/" + "a" * 202, "/etc/passwd", "/dev/", "/dev/-x", "dev/xvdf", ""],
    ),
    "mount": (
        [
            "/mnt/cachewarm",
            inputs.mount_point(inputs.DEFAULT_MOUNT_DIR, "warm-1"),
            "/" + "a" * 64,
            "/tmp/pytest-of-root/pytest-1/test_x0/reader",
        ],
        ["/" + "a" * 65, "mnt/x", "/", "/mnt/a:b", "", "/mnt/cachewarm/../../etc", "/a/.x", "/a/"],
    ),
    "statusBucket": (
        ["cachewarm-status-123456789012", "abc", "a" * 63, "a.b-c"],
        ["a" * 64, "ab", "Bucket-1", "-bucket", "bucket-", "a_b", ""],
    ),
    "statusPrefix": (
        [inputs.DEFAULT_STATUS_PREFIX, "ab", "a/b_c-d", "a" * 100],
        ["a" * 101, "warms/", "/warms", "w", "a.b", ""],
    ),
    "memcached": (
        ["127.0.0.1:11211", "ip-10-0-0-1.ec2.internal:11211", f"{HOST_MAX}:65535"],
        [f"h{HOST_MAX}:1", "127.0.0.1", "127.0.0.1:123456", ":11211", "a_b:1", ""],
    ),
    "to": (
        ["10.0.0.1:11211", "10.0.0.1:11211,ip-10-0-0-2.ec2.internal:11211", ENDPOINTS_MAX],
        [ENDPOINTS_MAX + ",10.9.9.9:1", "10.0.0.1:11211,", ",10.0.0.1:11211", "10.0.0.1", ""],
    ),
    "mode": (["add", "set"], ["adds", "ADD", "clobber", ""]),
    "placement": (
        [
            "evcache",
            "gomemcache",
            "libmemcached",
            "libmemcached,distribution=ketama-weighted,hash=md5,namespace=app1:",
            "pymemcache,keys=bytes,prefix=a/b.c-d:",
            "spymemcached,format=libmemcached,reps=160,weighted=true",
            "libmemcached,distribution=ketama-weighted,weights=2:1:1",
        ],
        ["twemproxy,config=/etc/n.yml,pool=a", "libmemcached,hash=sha1", "pymemcache,prefix=", "EVCACHE", ""],
    ),
    "threads": (
        ["1", "4", str(inputs.THREADS_MAX)],
        ["1000", "0", "04", "-1", str(inputs.THREADS_MAX + 1), ""],
    ),
    "maxItemsPerSecond": (["1", "250000", "9" * 9], ["1" + "0" * 9, "0", "-1", "1e6", "1_000", ""]),
    "maxBytesPerSecond": (["1", "67108864", "9" * 12], ["1" + "0" * 12, "0", "-1", "64M", "1e6", ""]),
    "adaptive": (
        ["on", "off", "1.05", "1.2", "1.99", "2", "2.5", "99.99", "100"],
        ["ON", "yes", "true", "1", "1.0", "1.04", "100.5", "101", "1.555", "0.5", ""],
    ),
    "order": (["recency", "crawl"], ["hot", "Recency", "lru", ""]),
    "crawlSleepUs": (["server", "0", "250", "999999", "1000000"], ["1000001", "-1", "Server", "1e3", ""]),
    "source": (
        ["10.0.1.17:11211", "ip-10-0-0-1.ec2.internal:11211", f"{HOST_MAX}:65535"],
        [f"h{HOST_MAX}:1", "10.0.1.17", "10.0.1.17:123456", ":11211", "a_b:1", ""],
    ),
    "sampleKeys": (["1", "10000", "9" * 7], ["0", "1" + "0" * 7, "-1", "01", "1e4", ""]),
    # `none` / `default` / 0 are the documents' way of leaving the flag out (below).
    # What the controller sends (the documents' patterns); the agents' flags take any s3:// URL of
    # that shape (a local S3 in tests), wider and never narrower (test_samples_mean_what_they_say).
    "toS3": (
        [
            f"s3://cw0a1b2-warm-1-{'a' * 16}/dumps/{ARN_A}/{ARN_B}",
            f"s3://cw-{'w' * 43}-{'0' * 16}/dumps/{ARN_A}/{ARN_B}",
            f"s3://cw-w-{'z' * 16}/dumps/{ARN_GOV}/{ARN_GOV}",
        ],
        [
            "none",
            "s3://bbb/" + "/".join(["p" * 64] * 7),
            "s3://B/p",
            "s3://b/p/",
            "s3://b/../x",
            "s3:/b",
            "b/p",
            "",
        ],
    ),
    "fromS3": (
        [
            f"s3://cw0a1b2-warm-1-{'a' * 16}/dumps/{ARN_A}/{ARN_B}/i-0123456789abcdef0",
            f"s3://cw-w-{'z' * 16}/dumps/{ARN_GOV}/{ARN_GOV}/i-01234567",
        ],
        [
            "none",
            "s3://abc",
            "s3://abc/warm-1",
            "s3://abc/warm-1/i-0123456789abcdef0/",
            "s3://abc/w/i-XYZ",
            "",
        ],
    ),
    "s3Region": (
        ["us-east-1", "eu-west-2", "ap-southeast-1", "us-gov-west-1"],
        ["default", "US-EAST-1", "us", ""],
    ),
    "uploadRate": (["1", "52428800", "9" * 12], ["1" + "0" * 12, "0", "-1", "50M", ""]),
}


def samples(param: str) -> list[str]:
    valid, invalid = SAMPLES[param]
    return [*valid, *invalid, *(h.format(v=valid[0]) for h in HOSTILE)]


def contract_allows(param: str, value: str) -> bool:
    """What the agent must accept for `param`, from the contract alone."""
    if param == "device":
        return inputs.matches(inputs.DEVICE, value)  # any block device; EBS_DEVICE is a subset (below)
    if param == "mount":
        return inputs.matches(inputs.AGENT_MOUNT, value)  # any path without `.` segments; MOUNT a subset
    if param in ("toS3", "fromS3"):  # any s3:// URL of that shape; the documents' patterns a subset
        return inputs.matches(inputs.S3_TRANSPORT_URL if param == "toS3" else inputs.S3_NODE_URL, value)
    ok = inputs.matches(inputs.SSM_PARAMETERS[param], value)
    if ok and param == "threads":
        return int(value) <= inputs.THREADS_MAX
    if ok and param in ("maxItemsPerSecond", "maxBytesPerSecond", "uploadRate"):
        return int(value) >= 1  # 0 = unlimited: the documents leave the flag out
    if ok and param in ("toS3", "fromS3", "s3Region"):
        return value not in ("none", "default")  # the volume path / the SDK's region: flag left out
    return ok


def command(name: str) -> click.Command:
    return agent_group.commands[name]


def options(name: str) -> dict[str, click.Option]:
    return {o: p for p in command(name).params if isinstance(p, click.Option) for o in p.opts}


def document(name: str) -> dict[str, Any]:
    return json.loads(DOCUMENTS[name].read_text())


def flags_of(name: str) -> list[str]:
    """The agent flags of command `name` that carry a parameter of its document."""
    return [f for f in options(name) if f in FLAG_PARAM and FLAG_PARAM[f] in document(name)["parameters"]]


def valid_argv(name: str, **override: str) -> list[str]:
    argv: list[str] = []
    for flag in flags_of(name):
        argv += [flag, override.get(flag, SAMPLES[FLAG_PARAM[flag]][0][0])]
    return argv


def parse(name: str, argv: list[str]) -> dict[str, Any]:
    """The agent's parameters for `argv`; click.UsageError if it refuses them. Nothing runs."""
    return command(name).make_context(name, list(argv)).params


CASES = [(name, flag, v) for name in DOCUMENTS for flag in flags_of(name) for v in samples(FLAG_PARAM[flag])]


def test_samples_mean_what_they_say() -> None:
    for param, (valid, invalid) in SAMPLES.items():
        for v in valid:
            assert contract_allows(param, v), (param, v)
        for v in invalid:
            assert not contract_allows(param, v), (param, v)
    # --to-s3 and --from-s3 take what the documents send (and more): the controller's URLs only.
    for param in ("toS3", "fromS3"):
        for v in SAMPLES[param][0]:
            assert inputs.matches(inputs.SSM_PARAMETERS[param], v), (param, v)
    for wider in ("s3://cachewarm-transport/warm-1", "s3://abc", "s3://cw-w-aaaa/dumps/x/y"):
        assert contract_allows("toS3", wider) and not inputs.matches(inputs.S3_TO_PARAM, wider), wider
    # --device is wider than what the documents send, never narrower; so is --mount.
    assert inputs.matches(inputs.EBS_DEVICE, EBS_DEVICE) and inputs.matches(inputs.DEVICE, EBS_DEVICE)
    mount = inputs.mount_point(inputs.DEFAULT_MOUNT_DIR, "w" * inputs.WARM_ID_MAX)
    assert inputs.matches(inputs.MOUNT, mount) and inputs.matches(inputs.AGENT_MOUNT, mount)
    assert inputs.EBS_DEVICE_PREFIX.startswith("/dev/")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_document_parameter_has_its_agent_flag(name: str) -> None:
    params = set(document(name)["parameters"])
    carried = {FLAG_PARAM[f] for f in flags_of(name)}
    assert params - SSM_ONLY == carried, f"{name}: document parameters without an agent flag or vice versa"
    for param in carried:
        assert document(name)["parameters"][param]["allowedPattern"] == inputs.SSM_PARAMETERS[param], param


@pytest.mark.parametrize(("name", "flag", "value"), CASES, ids=lambda x: repr(x)[:40])
def test_agent_flag_accepts_what_the_contract_allows(name: str, flag: str, value: str) -> None:
    param = FLAG_PARAM[flag]
    try:
        got = parse(name, valid_argv(name, **{flag: value}))
    except click.UsageError as e:
        assert not contract_allows(param, value), f"{name} {flag} refuses {value!r}: {e}"
        return
    assert contract_allows(param, value), f"{name} {flag} accepts {value!r}"
    key = flag[2:].replace("-", "_")
    assert str(got[key]) == value


# ---- the documents' command lines ----------------------------------------------------------------


def run_document(
    name: str, tmp_path: Path, parameters: dict[str, str], extra_env: dict[str, str] | None = None
) -> list[str]:
    """Run the document's shell lines as SSM would (parameters substituted, then bash); the final
    `cachewarm` is a stand-in that records its argv. Returns the argv after `cachewarm`."""
    doc = document(name)
    values = (
        {k: p.get("default") for k, p in doc["parameters"].items()} | {"agentVersion": VERSION} | parameters
    )
    for k, v in values.items():  # what SSM checks before anything runs
        assert v is not None and re.fullmatch(doc["parameters"][k]["allowedPattern"], v), (k, v)
    script = "\n".join(line for step in doc["mainSteps"] for line in step["inputs"]["runCommand"])
    script = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], script)
    bin_dir, out = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "cachewarm"
    shim.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "cachewarm, version ${{SHIM_VERSION:-{VERSION}}}"; exit 0; fi\n'
        'printf "%s\\0" "$@" > "$ARGV_OUT"\n'
    )
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_OUT": str(out), **(extra_env or {})}
    subprocess.run(["bash", "-c", script], env=env, check=True, timeout=60)
    argv = out.read_bytes().decode().split("\0")[:-1]
    assert argv[:2] == ["agent", name]
    return argv[2:]


def document_values(name: str, pick: int) -> dict[str, str]:
    """Valid values for every parameter of the document, the `pick`-th sample of each (or the last)."""
    params = set(document(name)["parameters"]) - SSM_ONLY
    out = {}
    for p in params:
        valid = SAMPLES[p][0]
        out[p] = valid[min(pick, len(valid) - 1)]
    if "device" in out:
        out["device"] = EBS_DEVICE  # the only kind the documents accept
    if "mount" in out and not inputs.matches(inputs.MOUNT, out["mount"]):
        out["mount"] = inputs.mount_point(inputs.DEFAULT_MOUNT_DIR, "warm-1")  # documents: MOUNT_ROOT only
    return out


@pytest.mark.parametrize("name", DOCUMENTS)
@pytest.mark.parametrize("pick", [0, 1, 2, 3])
def test_document_command_line_parses_as_the_agent(name: str, pick: int, tmp_path: Path) -> None:
    sent = document_values(name, pick)
    got = parse(name, run_document(name, tmp_path, sent))
    for flag in flags_of(name):
        key, param = flag[2:].replace("-", "_"), FLAG_PARAM[flag]
        assert str(got[key]) == sent[param], (flag, got[key], sent[param])


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if "maxItemsPerSecond" in document(n)["parameters"]])
def test_unlimited_rate_leaves_the_flag_out(name: str, tmp_path: Path) -> None:
    argv = run_document(name, tmp_path, {**document_values(name, 0), "maxItemsPerSecond": "0"})
    assert "--max-items-per-second" not in argv
    assert parse(name, argv)["max_items_per_second"] is None


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if "maxBytesPerSecond" in document(n)["parameters"]])
def test_unlimited_byte_rate_leaves_the_flag_out(name: str, tmp_path: Path) -> None:
    argv = run_document(name, tmp_path, {**document_values(name, 0), "maxBytesPerSecond": "0"})
    assert "--max-bytes-per-second" not in argv
    assert parse(name, argv)["max_bytes_per_second"] is None


@pytest.mark.parametrize(("name", "param"), [("dump", "toS3"), ("populate", "fromS3")])
def test_the_volume_path_by_default_and_s3_only_when_named(name: str, param: str, tmp_path: Path) -> None:
    """The documents' defaults (`none`, `default`, 0) leave the S3 flags out: the volume path, as before
    the S3 transport; `device` = none leaves --device out (the S3 transport's plain directory)."""
    defaults = {param: "none", "s3Region": "default"} | ({"uploadRate": "0"} if name == "dump" else {})
    argv = run_document(name, tmp_path, document_values(name, 0) | defaults)
    assert not {"--to-s3", "--from-s3", "--s3-region", "--upload-rate"} & set(argv)
    assert "--device" in argv
    sent = document_values(name, 0) | {"device": "none"}
    argv = run_document(name, tmp_path, sent)
    assert "--device" not in argv
    got = parse(name, argv)
    assert got["device"] is None and got[param.replace("S3", "_s3")] == sent[param]


def test_the_dump_agent_is_adaptive_and_recency_ordered_by_default(tmp_path: Path) -> None:
    doc = document("dump")["parameters"]
    assert doc["adaptive"]["default"] == inputs.DEFAULT_ADAPTIVE == "on"
    assert doc["order"]["default"] == inputs.DEFAULT_ORDER == "recency"
    got = parse("dump", run_document("dump", tmp_path, document_values("dump", 0)))
    assert (got["adaptive"], got["order"], got["crawl_sleep_us"]) == ("on", "recency", "server")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_a_document_refuses_another_agent_version(name: str, tmp_path: Path) -> None:
    """Exit 126 before the agent starts when `cachewarm --version` is not the stack's version."""
    with pytest.raises(subprocess.CalledProcessError) as e:
        run_document(name, tmp_path, document_values(name, 0), {"SHIM_VERSION": "0.0.9"})
    assert e.value.returncode == 126
    assert not (tmp_path / "argv").exists()


@pytest.mark.parametrize(
    "path",
    ["/etc/systemd/system", "/mnt/cachewarm/../../etc", "/mnt/cachewarm/./x", "/mnt/cachewarm/.ssh", "/root"],
)
def test_a_document_cannot_mount_outside_its_root(path: str) -> None:
    """The agents run as root and format + mount a new volume at `mount`: the documents (and the
    execution input's mount_dir) admit only paths under MOUNT_ROOT, without `.`-led segments."""
    for name in ("dump", "populate"):
        pattern = document(name)["parameters"]["mount"]["allowedPattern"]
        assert not re.fullmatch(pattern, path), (name, path)
    assert not inputs.matches(inputs.MOUNT_DIR, path)
    assert not inputs.matches(inputs.AGENT_MOUNT, path) or ".." not in path


def test_the_populate_document_passes_the_recheck_source() -> None:
    """The source node the populator re-checks against reaches the agent as `--source`; `none` (a
    populator in another region) as `--accept-no-recheck`, never a silent skip."""
    script = "\n".join(document("populate")["mainSteps"][0]["inputs"]["runCommand"])
    assert "SRC=(--accept-no-recheck)" in script
    assert "if [ '{{ recheckSource }}' != 'none' ]; then SRC=(--source '{{ recheckSource }}'); fi" in script
    assert script.rstrip().endswith('"${SRC[@]}"')
    for value in ("10.0.1.7:11211", "ip-10-0-1-7.ec2.internal:11211"):
        assert inputs.matches(inputs.RECHECK_SOURCE, value)
        assert parse("populate", [*valid_argv("populate"), "--source", value])["source"]
    for bad in ("", "10.0.1.7", "x;id:1", "none "):
        assert not inputs.matches(inputs.RECHECK_SOURCE, bad)
