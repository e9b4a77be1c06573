"""EC2's ClientToken idempotency, which moto lacks, patched into moto for the controller tests.

EC2 (API reference, "Ensuring idempotency"): RunInstances or CreateVolume repeated with a token already
used returns the resource the first request made instead of making another; DescribeInstances filters
on `client-token`. moto 5.2.5 stores an instance's token but makes a new instance on every call, makes
a new volume on every call, and raises NotImplementedError for the filter. The patch keeps moto's own
handlers and only answers a repeated token with the earlier resource (an instance found by the token
moto stored; a volume by a token table, since moto drops a volume's token). A token used with other
parameters would be EC2's IdempotentParameterMismatch; the controller never does that, and the
tests that matter here make resources with tokens of their own.
"""

from __future__ import annotations

from typing import Any

import pytest


def patch_client_tokens(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str, str], str]:
    from moto.core.responses import ActionResult
    from moto.ec2 import utils
    from moto.ec2.responses.elastic_block_store import ElasticBlockStore
    from moto.ec2.responses.instances import InstanceResponse

    monkeypatch.setitem(utils.filter_dict_attribute_mapping, "client-token", "client_token")
    volumes: dict[tuple[str, str, str], str] = {}  # (account, region, token) -> volume id

    run_instances = InstanceResponse.run_instances

    def idempotent_run_instances(self: Any) -> Any:
        token = self._get_param("ClientToken")
        if token:
            for reservation in self.ec2_backend.reservations.values():
                if any(getattr(i, "client_token", None) == token for i in reservation.instances):
                    return ActionResult(reservation)
        return run_instances(self)

    create_volume = ElasticBlockStore.create_volume

    def idempotent_create_volume(self: Any) -> Any:
        token = self._get_param("ClientToken")
        key = (self.current_account, self.region, str(token))
        if token and key in volumes:
            existing = self.ec2_backend.volumes.get(volumes[key])
            if existing is not None:
                return ActionResult(existing)
        result = create_volume(self)
        if token:
            made = [v for v in self.ec2_backend.volumes.values()]
            volumes[key] = made[-1].id  # moto keeps volumes in creation order
        return result

    monkeypatch.setattr(InstanceResponse, "run_instances", idempotent_run_instances)
    monkeypatch.setattr(ElasticBlockStore, "create_volume", idempotent_create_volume)
    return volumes
