"""An in-memory EC2 for the 300-node history test (tests/controller/test_scale.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

FIELDS = {
    "vpc-id": "VpcId",
    "private-ip-address": "PrivateIpAddress",
    "private-dns-name": "PrivateDnsName",
    "instance-id": "InstanceId",
    "volume-id": "VolumeId",
    "client-token": "ClientToken",
}


class FakeEc2:
    """In-memory EC2 for the 300-node history test only: moto's EC2 spends ~2 minutes serializing 600
    instances through 300 RunInstances/600 SendCommands, which says nothing about the history size.
    It implements just the calls the steps make, with EC2's response shapes; the per-node EC2 logic
    itself is covered against moto by the 3-node end-to-end tests."""

    def __init__(self, subnets: dict[str, str], vpc_id: str | None = None) -> None:
        self.subnets = subnets  # az -> subnet id
        self.vpc_id = vpc_id  # every instance's VPC (the stack's)
        self.instances: dict[str, dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self.volume_tokens: dict[str, str] = {}
        self.instance_tokens: dict[str, str] = {}
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:017x}"

    @staticmethod
    def _tags(spec: list[dict[str, Any]] | None, kind: str) -> list[dict[str, str]]:
        return [t for s in spec or [] if s["ResourceType"] == kind for t in s["Tags"]]

    def add_instances(
        self,
        count: int,
        itype: str,
        tags: list[dict[str, str]],
        ips: list[str] | None = None,
        groups: list[str] | None = None,
    ) -> list[str]:
        azs = sorted(self.subnets)
        ids = []
        for i in range(count):
            az = azs[i % len(azs)]
            iid = self._id("i")
            self.instances[iid] = {
                "VpcId": self.vpc_id,
                "PrivateIpAddress": ips[i] if ips else f"10.0.{self._n // 250}.{self._n % 250}",
                "InstanceId": iid,
                "InstanceType": itype,
                "State": {"Name": "running"},
                "Placement": {"AvailabilityZone": az},
                "SubnetId": self.subnets[az],
                "BlockDeviceMappings": [{"DeviceName": "/dev/xvda"}],
                "SecurityGroups": [{"GroupId": g} for g in groups or []],
                "Tags": list(tags),
            }
            ids.append(iid)
        return ids

    @staticmethod
    def _filters(filters: Any) -> list[tuple[str, set[Any]]]:
        # Sets: the 1000-node budget test filters 1,500 instances by batches of 1,000 values.
        return [(f["Name"], set(f["Values"])) for f in filters]

    @staticmethod
    def _match(res: dict[str, Any], filters: list[tuple[str, set[Any]]]) -> bool:
        tags = {t["Key"]: t["Value"] for t in res.get("Tags", [])} if filters else {}
        for name, values in filters:
            if name.startswith("tag:"):
                if tags.get(name[4:]) not in values:
                    return False
            elif name == "tag-key":
                if not values & tags.keys():
                    return False
            elif name == "instance-state-name":
                if res["State"]["Name"] not in values:
                    return False
            elif name in FIELDS:
                if res.get(FIELDS[name]) not in values:
                    return False
            else:
                raise NotImplementedError(name)
        return True

    def get_paginator(self, op: str) -> Any:
        fake = self

        class _P:
            def paginate(self, **kw: Any) -> Iterator[dict[str, Any]]:
                yield getattr(fake, op)(**kw)

        return _P()

    def describe_instances(self, InstanceIds: list[str] | None = None, Filters: Any = ()) -> dict[str, Any]:
        wanted, filters = None if InstanceIds is None else set(InstanceIds), self._filters(Filters)
        found = [
            dict(i)
            for iid, i in self.instances.items()
            if (wanted is None or iid in wanted) and self._match(i, filters)
        ]
        return {"Reservations": [{"Instances": found}] if found else []}

    def describe_instance_types(self, InstanceTypes: list[str]) -> dict[str, Any]:
        return {"InstanceTypes": [{"InstanceType": t, "Hypervisor": "nitro"} for t in InstanceTypes]}

    def describe_launch_template_versions(self, **kw: Any) -> dict[str, Any]:
        return {"LaunchTemplateVersions": [{"LaunchTemplateData": {"InstanceType": "m5.large"}}]}

    def create_volume(self, **kw: Any) -> dict[str, Any]:
        token = kw.get("ClientToken")
        if token in self.volume_tokens and self.volume_tokens[token] in self.volumes:
            return dict(self.volumes[self.volume_tokens[token]])  # EC2's idempotency
        vid = self._id("vol")
        if token:
            self.volume_tokens[token] = vid
        assert kw["VolumeType"] == "io2" and kw["MultiAttachEnabled"] and kw["Encrypted"]
        self.volumes[vid] = {
            "VolumeId": vid,
            "State": "available",
            "AvailabilityZone": kw["AvailabilityZone"],
            "Tags": self._tags(kw.get("TagSpecifications"), "volume"),
            "Attachments": [],
        }
        return dict(self.volumes[vid])

    def describe_volumes(self, VolumeIds: list[str] | None = None, Filters: Any = ()) -> dict[str, Any]:
        wanted, filters = None if VolumeIds is None else set(VolumeIds), self._filters(Filters)
        vols = [
            dict(v)
            for vid, v in self.volumes.items()
            if (wanted is None or vid in wanted) and self._match({**v, "State": {"Name": "running"}}, filters)
        ]
        return {"Volumes": vols}

    def run_instances(self, **kw: Any) -> dict[str, Any]:
        token = kw.get("ClientToken")
        if token in self.instance_tokens:  # EC2's idempotency
            return {"Instances": [dict(self.instances[self.instance_tokens[token]])]}
        az = next(a for a, s in self.subnets.items() if s == kw["SubnetId"])
        iid = self.add_instances(1, "m5.large", self._tags(kw.get("TagSpecifications"), "instance"))[0]
        self.instances[iid]["Placement"] = {"AvailabilityZone": az}
        self.instances[iid]["ClientToken"] = token
        if token:
            self.instance_tokens[token] = iid
        return {"Instances": [dict(self.instances[iid])]}

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        for iid in InstanceIds:
            self.instances[iid]["State"] = {"Name": "terminated"}
        return {"TerminatingInstances": []}

    def delete_volume(self, VolumeId: str) -> dict[str, Any]:
        del self.volumes[VolumeId]
        return {}
