"""Patterns, limits and defaults of every value that crosses a process boundary.

The execution input (`lambdas/cachewarm_controller/model.py`), the SSM documents' `allowedPattern`s
(`infra/ssm_documents/*.json`) and the agent's flags (`cachewarm agent …`) all take theirs from here;
`tests/contract/` fails when one of them drifts. Patterns are anchored (`^…$`) because SSM and JSON
Schema need them so; Python code matches them with `fullmatch` (a bare `$` accepts a trailing newline).
"""

from __future__ import annotations

import re

# ---- identifiers ----------------------------------------------------------------------------------
# The warm id is also the Step Functions execution name and part of the mount path and the S3 keys.
WARM_ID = r"^[a-z0-9][a-z0-9-]{2,47}$"
WARM_ID_MAX = 48
INSTANCE_ID = r"^i-[0-9a-f]{8,17}$"
VOLUME_ID = r"^vol-[0-9a-f]{8,17}$"
SUBNET_ID = r"^subnet-[0-9a-f]{8,17}$"
AZ_NAME = r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$"
REPLICA_NAME = r"^[A-Za-z0-9._:/-]{1,128}$"
ASG_NAME = r"^[A-Za-z0-9._:/-]{1,255}$"
LAUNCH_TEMPLATE_ID = r"^lt-[0-9a-f]{8,17}$"
LAUNCH_TEMPLATE_NAME = r"^[A-Za-z0-9()./_-]{3,128}$"
LAUNCH_TEMPLATE_VERSION = r"^(\$Latest|\$Default|[0-9]{1,10})$"
KMS_KEY_ID = r"^[A-Za-z0-9:/_-]{1,2048}$"
ATTACH_DEVICE_NAME = r"^/dev/(sd[f-p]|xvd[f-p])$"

# ---- memcached endpoints --------------------------------------------------------------------------
ENDPOINT = r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$"
MAX_ENDPOINTS = 500
# The source node's memcached a populator re-checks its copies against, or none (a populator in another
# region cannot reach it: add mode then runs without the re-check, said in its summary).
RECHECK_SOURCE = r"^(none|[A-Za-z0-9.-]{1,253}:[0-9]{1,5})$"
ENDPOINT_LIST = r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}(,[A-Za-z0-9.-]{1,253}:[0-9]{1,5}){0,499}$"

# ---- devices and mounts ---------------------------------------------------------------------------
# An EBS volume's stable path on a Nitro instance (NVMe names are not stable); what SSM passes.
EBS_DEVICE_PREFIX = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_"
EBS_DEVICE = r"^/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol[0-9a-f]{8,17}$"
# Any block device: the agent's own flag (a loop device in tests, a renamed device by hand) — a
# superset of EBS_DEVICE.
DEVICE = r"^/dev/[A-Za-z0-9][A-Za-z0-9/_.-]{0,200}$"
# The execution input's `mount_dir`; each warm mounts at `<mount_dir>/<warm_id>` (MOUNT). Both stay
# under MOUNT_ROOT: the agents run as root and format + mount a new volume there, so a path the input
# or a SendCommand names must never reach a system directory. No segment starts with `.` (no `..`).
MOUNT_ROOT = "/mnt/cachewarm"
# Path segments of at most 64 characters, at most 2 below the root for `mount_dir` (144 characters),
# 3 for a mount point (+ the warm id: 209); no look-ahead (pydantic's regex engine has none).
MOUNT_DIR_MAX = 144
MOUNT_DIR = r"^/mnt/cachewarm(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}){0,2}$"
MOUNT_MAX = 209
MOUNT = r"^/mnt/cachewarm(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}){0,3}$"
# The agent's own --mount flag (run by hand or in tests on loop devices): any absolute path, still no
# `.`-led segment — a superset of MOUNT, as DEVICE is of EBS_DEVICE.
AGENT_MOUNT = r"^(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}){1,8}$"

# ---- the status bucket ----------------------------------------------------------------------------
STATUS_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
STATUS_PREFIX = r"^[A-Za-z0-9][A-Za-z0-9/_-]{0,98}[A-Za-z0-9]$"

# ---- agent parameters (as SSM strings) ------------------------------------------------------------
MODE = r"^(add|set)$"
RATE = r"^[0-9]{1,9}$"  # items/s, 0 = unlimited
BYTE_RATE = r"^[0-9]{1,12}$"  # bytes/s, 0 = unlimited
BYTE_RATE_MAX = 999_999_999_999
# The dumper's adaptive source guard (on by default on AWS): on, off, or on with its own threshold (back
# off above RATIO x the probes' latency before the dump; 1.05 .. 100, at most 2 decimals, as the
# dumper's --adaptive-target takes it); and the dump's order.
ADAPTIVE = r"^(on|off|1\.(0[5-9]|[1-9][0-9]?)|[2-9](\.[0-9]{1,2})?|[1-9][0-9](\.[0-9]{1,2})?|100)$"
ADAPTIVE_TARGET_MIN = 1.05
ADAPTIVE_TARGET_MAX = 100.0
DEFAULT_ADAPTIVE_TARGET = 1.5
ORDER = r"^(recency|crawl)$"
# `lru_crawler sleep` while the dump runs, microseconds (0 .. 1000000); server = leave the server's own.
CRAWL_SLEEP = r"^(server|[0-9]{1,6}|1000000)$"
CRAWL_SLEEP_MAX = 1_000_000
# Where the destination's client looks for a key (docs/placement.md): the `--placement` schemes that
# need no configuration file on the populator (twemproxy's and mcrouter's read one: CLI only).
_PREFIX = r"[A-Za-z0-9._:/-]{1,64}"
_LIBMEMCACHED_OPTION = (
    r"(distribution=(modula|ketama|ketama-weighted|ketama-spy)"
    r"|hash=(default|one_at_a_time|md5|crc|fnv1_64|fnv1a_64|fnv1_32|fnv1a_32|hsieh|murmur|jenkins)"
    rf"|namespace={_PREFIX}|weights=[0-9]{{1,7}}(:[0-9]{{1,7}}){{0,499}})"
)
_SPYMEMCACHED_OPTION = (
    r"(format=(spymemcached|libmemcached)|reps=[0-9]{1,5}|weighted=(true|false)"
    r"|weights=[0-9]{1,7}(:[0-9]{1,7}){0,499})"
)
PLACEMENT = (
    rf"^(evcache|gomemcache|libmemcached(,{_LIBMEMCACHED_OPTION}){{0,4}}"
    rf"|spymemcached(,{_SPYMEMCACHED_OPTION}){{0,4}}"
    rf"|pymemcache(,(keys=(str|bytes)|prefix={_PREFIX})){{0,2}})$"
)
THREADS = r"^([1-9][0-9]?|1[0-9]{2}|2[0-4][0-9]|25[0-6])$"  # 1 .. THREADS_MAX
THREADS_MAX = 256  # the dumper's own limit (dumper-cpp options.cc)
# SSM Run Command: 1 s .. 48 h.
EXECUTION_TIMEOUT_MAX_S = 172_800
EXECUTION_TIMEOUT = r"^([1-9][0-9]{0,4}|1[0-6][0-9]{4}|17[0-1][0-9]{3}|172[0-7][0-9]{2}|172800)$"

# ---- S3 as the transport (docs/transport-s3.md) -------------------------------------------------------
# `agent dump --to-s3 s3://BUCKET/PREFIX`: the node's objects go under PREFIX/<node-id>/. A segment may
# hold `:` (an instance ARN's first half: the controller's prefixes name the instances, below).
_S3_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
_S3_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9._:-]{0,63}"
S3_TRANSPORT_URL = rf"^s3://{_S3_BUCKET}(/{_S3_SEGMENT}){{0,6}}$"
# `agent populate --from-s3 s3://BUCKET/PREFIX/<node-id>`: one source node's objects.
S3_NODE_URL = rf"^s3://{_S3_BUCKET}(/{_S3_SEGMENT}){{0,6}}/i-[0-9a-f]{{8,17}}$"
AWS_REGION = r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$"
# What the controller sends (the SSM documents' `toS3`/`fromS3`): only a transport bucket, named
# `<stack prefix><warm id>-<TRANSPORT_TOKEN_CHARS random characters>`, and only the prefix of one
# (source node, populator) pair, `dumps/<source instance ARN>/<populator instance ARN>`: each
# instance's IAM reaches only keys that name its own ARN (docs/transport-s3.md, "Who reads what").
# At synth the stack writes its own prefix in place of the prefix's shape (`transport_bucket_head`,
# infra compute.py).
TRANSPORT_PREFIX_SHAPE = r"[a-z0-9][a-z0-9-]{0,6}-"
TRANSPORT_TOKEN_CHARS = 16


def transport_bucket_head(prefix: str = TRANSPORT_PREFIX_SHAPE, prefix_len: int = 2) -> str:
    """A transport bucket's name up to its token: the prefix (a regex), then the warm id, cut so
    that the name fits S3's 63 characters."""
    return rf"{prefix}[a-z0-9-]{{1,{63 - prefix_len - 1 - TRANSPORT_TOKEN_CHARS}}}"


_TRANSPORT_BUCKET = rf"{transport_bucket_head()}-[a-z0-9]{{{TRANSPORT_TOKEN_CHARS}}}"
_INSTANCE_ARN = r"arn:aws(-[a-z]+)*:ec2:[a-z]{2}(-[a-z]+)+-[0-9]{1,2}:[0-9]{12}:instance/i-[0-9a-f]{8,17}"
_PAIR_PREFIX = rf"dumps/{_INSTANCE_ARN}/{_INSTANCE_ARN}"
# The SSM documents' forms: `none` = the volume path (the flag left out), `default` = the SDK's region.
S3_TO_PARAM = rf"^(none|s3://{_TRANSPORT_BUCKET}/{_PAIR_PREFIX})$"
S3_FROM_PARAM = rf"^(none|s3://{_TRANSPORT_BUCKET}/{_PAIR_PREFIX}/i-[0-9a-f]{{8,17}})$"
S3_REGION_PARAM = r"^(default|[a-z]{2}(-[a-z]+)+-[0-9]{1,2})$"
# The documents' `device`: `none` = no volume (the S3 transport: --mount is a plain directory).
DEVICE_PARAM = r"^(none|/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol[0-9a-f]{8,17})$"

# ---- verification (`cachewarm agent verify`) -------------------------------------------------------
SAMPLE_KEYS = r"^[1-9][0-9]{0,6}$"  # 1 .. 9,999,999 keys per node
SAMPLE_KEYS_MAX = 1_000_000  # what the controller sends at most (the input model's limit)

# ---- the agent's installation (install-agent document, populator user data) -----------------------
# Artifacts are CDK assets: s3://<asset bucket>/<hash>.<ext>.
S3_URL = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9/._-]{1,1024}$"
SHA256 = r"^[0-9a-f]{64}$"
# The cachewarm package's version (PEP 440 characters only: no shell metacharacters).
VERSION = r"^[0-9][0-9A-Za-z.+-]{0,63}$"
PORT = r"^[0-9]{1,5}$"

# ---- scale ------------------------------------------------------------------------------------------
# One execution warms at most this many source nodes (its Lambdas' work per call and its history are
# sized for it: lambdas/cachewarm_controller/budget.py and history.py).
MAX_SOURCE_NODES = 1000
# SSM SendCommand takes at most this many instance ids per call.
SSM_MAX_TARGETS = 50

# ---- defaults -------------------------------------------------------------------------------------
DEFAULT_STATUS_PREFIX = "warms"
DEFAULT_MOUNT_DIR = "/mnt/cachewarm"
DEFAULT_MEMCACHED_PORT = 11211
DEFAULT_MODE = "add"
DEFAULT_PLACEMENT = "evcache"
DEFAULT_ADAPTIVE = "on"
DEFAULT_ORDER = "recency"
DEFAULT_CRAWL_SLEEP = "server"

# The SSM documents' parameters and the pattern each must carry (tests/contract checks both documents).
SSM_PARAMETERS: dict[str, str] = {
    "warmId": WARM_ID,
    "nodeId": INSTANCE_ID,
    "device": DEVICE_PARAM,
    "mount": MOUNT,
    "statusBucket": STATUS_BUCKET,
    "statusPrefix": STATUS_PREFIX,
    "maxItemsPerSecond": RATE,
    "maxBytesPerSecond": BYTE_RATE,
    "adaptive": ADAPTIVE,
    "order": ORDER,
    "crawlSleepUs": CRAWL_SLEEP,
    "executionTimeout": EXECUTION_TIMEOUT,
    "memcached": ENDPOINT,
    "threads": THREADS,
    "to": ENDPOINT_LIST,
    "mode": MODE,
    "placement": PLACEMENT,
    "source": ENDPOINT,
    "recheckSource": RECHECK_SOURCE,
    "sampleKeys": SAMPLE_KEYS,
    "agentVersion": VERSION,
    "port": PORT,
    "installScriptUrl": S3_URL,
    "installScriptSha256": SHA256,
    "agentBundleUrl": S3_URL,
    "agentBundleSha256": SHA256,
    "dumperTarballUrl": S3_URL,
    "dumperTarballSha256": SHA256,
    "toS3": S3_TO_PARAM,
    "fromS3": S3_FROM_PARAM,
    "s3Region": S3_REGION_PARAM,
    "uploadRate": BYTE_RATE,
}


def matches(pattern: str, value: str) -> bool:
    """True when `value` matches the anchored `pattern` as a whole (no trailing newline slips through)."""
    return re.fullmatch(pattern, value) is not None


def mount_point(mount_dir: str, warm_id: str) -> str:
    """Where a warm's volume is mounted on both hosts."""
    return f"{mount_dir}/{warm_id}"


def ebs_device_path(volume_id: str) -> str:
    """The stable device path of an EBS volume on a Nitro instance."""
    return EBS_DEVICE_PREFIX + volume_id.replace("-", "")
