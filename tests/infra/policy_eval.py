"""A small evaluator of the synthesized IAM and bucket policies (issue 26's acceptance: "a plan or
status object forged with agent credentials is refused"). moto's IAM enforcement knows neither the
`${ec2:SourceInstanceARN}` policy variable nor bucket-policy denies by principal, so the tests
evaluate the template's own documents: an explicit Deny wins, else an Allow is needed.

Covers what this stack's policies use: Action/Resource wildcards, policy variables in Resource,
the condition operators String(Not)Equals, StringLike, Arn(Not)Equals, Arn(Not)Like, Null, Bool."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

ACCOUNT, REGION, PARTITION = "123456789012", "us-east-1", "aws"


def resolve(value: Any, template: dict[str, Any]) -> Any:
    """CloudFormation intrinsics -> stand-in strings (a bucket's Ref and Arn agree, a role's Arn is
    `arn:aws:iam::<account>:role/<logical id>`, another stack's output `output-<stack>-<output>`)."""
    if isinstance(value, list):
        return [resolve(v, template) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        ref = value["Ref"]
        return {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION}.get(
            ref, f"ref-{ref}".lower()
        )
    if "Fn::GetAtt" in value:
        lid, attr = value["Fn::GetAtt"]
        kind = template["Resources"].get(lid, {}).get("Type", "")
        if kind == "AWS::S3::Bucket" and attr == "Arn":
            return f"arn:aws:s3:::ref-{lid}".lower()
        if kind == "AWS::Logs::LogGroup" and attr == "Arn":
            return f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:ref-{lid}:*".lower()
        if kind == "AWS::IAM::Role" and attr == "Arn":
            return f"arn:aws:iam::{ACCOUNT}:role/{lid}"
        return f"getatt-{lid}-{attr}".lower()
    if "Fn::GetStackOutput" in value:  # another stack's output (a destination region's resources)
        out = value["Fn::GetStackOutput"]
        return f"output-{out['StackName']}-{out['OutputName']}".lower()
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(str(resolve(p, template)) for p in parts)
    return {k: resolve(v, template) for k, v in value.items()}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


_VAR = re.compile(r"\$\{([^}]+)\}")


@dataclass
class Request:
    action: str
    resource: str
    principal_arn: str
    context: dict[str, str] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        if key == "aws:PrincipalArn":
            return self.principal_arn
        return self.context.get(key)


def _resource_matches(patterns: list[str], req: Request) -> bool:
    for pattern in patterns:
        missing = False

        def sub(m: re.Match[str]) -> str:
            nonlocal missing
            got = req.value(m.group(1))
            if got is None:
                missing = True
                return ""
            return got

        concrete = _VAR.sub(sub, pattern)
        if not missing and fnmatchcase(req.resource, concrete):
            return True
    return False


def _condition_holds(conditions: dict[str, dict[str, Any]], req: Request) -> bool:
    for op, tests in conditions.items():
        for key, expected in tests.items():
            wanted = [str(v) for v in _list(expected)]
            got = req.value(key)
            if op == "Null":
                if (got is None) != (wanted[0] == "true"):
                    return False
                continue
            negated = "Not" in op
            if got is None:
                if not negated:
                    return False
                continue
            if op.startswith(("StringLike", "ArnLike", "ArnNotLike")):
                hit = any(fnmatchcase(got, w) for w in wanted)
            elif op in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals", "Bool"):
                hit = got in wanted
            else:
                raise NotImplementedError(op)
            if hit == negated:
                return False
    return True


def decide(statements: list[dict[str, Any]], req: Request) -> str:
    """ "Deny" (explicit), "Allow", or "ImplicitDeny"."""
    allowed = False
    for st in statements:
        if not any(fnmatchcase(req.action, a) for a in _list(st["Action"])):
            continue
        if not _resource_matches([str(r) for r in _list(st["Resource"])], req):
            continue
        if "Condition" in st and not _condition_holds(st["Condition"], req):
            continue
        if st["Effect"] == "Deny":
            return "Deny"
        allowed = True
    return "Allow" if allowed else "ImplicitDeny"
