"""Names in the offline world (tests/controller): its SSM documents, the simulated agents' warm id."""

from __future__ import annotations

DUMP_DOC = "cachewarm-dump-agent"
POPULATE_DOC = "cachewarm-populate-agent"
VERIFY_DOC = "cachewarm-verify-agent"
INSTALL_DOC = "cachewarm-install-agent"
UNMOUNT_DOC = "cachewarm-unmount"
STATS_DOC = "cachewarm-memcached-stats"
# SSM document stem (infra/ssm_documents/<stem>.json) -> its name in the offline world.
DOCUMENT_NAMES = {
    "dump-agent": DUMP_DOC,
    "populate-agent": POPULATE_DOC,
    "verify-agent": VERIFY_DOC,
    "install-agent": INSTALL_DOC,
    "unmount": UNMOUNT_DOC,
    "memcached-stats": STATS_DOC,
}
# The simulated statuses name no warm (the controller keys them by role and node); the objects
# written to S3 carry the warm id, as the agents' do.
NO_WARM_ID = ""
