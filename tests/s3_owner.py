"""S3's bucket owner condition, which moto 5.2.5 ignores: a botocore hook on a client that answers
403 AccessDenied when a request's ExpectedBucketOwner is not the bucket's owner (as S3 does), and
records every operation that could have named an owner but did not — so a test shows both that a
bucket of the same name in another account is refused and that no call of the code under test
skips the check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError


@dataclass
class OwnerCheck:
    """`owners`: bucket -> the account that owns it (absent: the test's own account, `default`)."""

    default: str
    owners: Mapping[str, str] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)  # operations sent without ExpectedBucketOwner
    refused: list[str] = field(default_factory=list)

    def install(self, client: Any) -> OwnerCheck:
        client.meta.events.register("provide-client-params.s3", self._check)
        return self

    def _check(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if "ExpectedBucketOwner" not in model.input_shape.members or "Bucket" not in params:
            return  # CreateBucket, ListBuckets: nothing to name
        expected = params.get("ExpectedBucketOwner")
        if expected is None:
            self.unchecked.append(model.name)
            return
        if expected != self.owners.get(params["Bucket"], self.default):
            self.refused.append(model.name)
            raise ClientError(
                {
                    "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                    "ResponseMetadata": {"HTTPStatusCode": 403},
                },
                model.name,
            )
