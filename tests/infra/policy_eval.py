"""A small evaluator of the synthesized IAM and bucket policies (issue 26's acceptance: "a plan or
status object forged with agent credentials is refused"). moto's IAM enforcement knows neither the
`${ec2:SourceInstanceARN}` policy variable nor bucket-policy denies by principal, so the tests
evaluate the template's own documents: an explicit Deny wins, else an Allow is needed.

Covers what this stack's policies use: Action/NotAction and Resource/NotResource wildcards, a
resource policy's Principal, policy variables in resources and condition values, the condition
operators String(Not)Equals, String(Not)Like, Arn(Not)Equals, Arn(Not)Like (and their IfExists
forms), Null, Bool."""

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


class _Unresolved(Exception):
    """A policy variable the request has no value for: AWS may treat the whole statement as
    invalid. Modelled as "the statement does not apply" — for an Allow that grants less, for a Deny
    that denies less: a denial this evaluator finds does not rest on it."""


def _sub(text: str, req: Request) -> str:
    def one(m: re.Match[str]) -> str:
        got = req.value(m.group(1))
        if got is None:
            raise _Unresolved(m.group(1))
        return got

    return _VAR.sub(one, text)


def _resource_matches(patterns: list[str], req: Request) -> bool:
    for pattern in patterns:
        try:
            concrete = _sub(pattern, req)
        except _Unresolved:
            continue
        if fnmatchcase(req.resource, concrete):
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
            base, if_exists = (op[: -len("IfExists")], True) if op.endswith("IfExists") else (op, False)
            negated = "Not" in base
            if got is None:
                if not (negated or if_exists):
                    return False
                continue
            if base in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
                hit = any(fnmatchcase(got, _sub(w, req)) for w in wanted)
            elif base in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals", "Bool"):
                hit = got in [_sub(w, req) for w in wanted]
            else:
                raise NotImplementedError(op)
            if hit == negated:
                return False
    return True


def _principal_matches(principal: Any, req: Request) -> bool:
    """A resource policy's Principal: "*", {"AWS": "*"}, {"AWS": [ARNs or account roots]} or
    {"Service": [service principals]} (a request from a service names it as its principal)."""
    if principal is None or principal == "*":
        return True
    if isinstance(principal, dict) and req.principal_arn in _list(principal.get("Service", [])):
        return True
    aws = _list(principal.get("AWS", [])) if isinstance(principal, dict) else []
    account = req.principal_arn.split(":")[4] if req.principal_arn.count(":") >= 5 else ""
    return any(
        p == "*" or p == req.principal_arn or p in (account, f"arn:aws:iam::{account}:root") for p in aws
    )


def _applies(st: dict[str, Any], req: Request) -> bool:
    if "Action" in st:
        if not any(fnmatchcase(req.action, a) for a in _list(st["Action"])):
            return False
    elif any(fnmatchcase(req.action, a) for a in _list(st["NotAction"])):
        return False
    if not _principal_matches(st.get("Principal"), req):
        return False
    try:
        if "Resource" in st:
            if not _resource_matches([str(r) for r in _list(st["Resource"])], req):
                return False
        elif any(fnmatchcase(req.resource, _sub(str(r), req)) for r in _list(st["NotResource"])):
            return False
        return "Condition" not in st or _condition_holds(st["Condition"], req)
    except _Unresolved:
        return False


def decide(statements: list[dict[str, Any]], req: Request) -> str:
    """ "Deny" (explicit), "Allow", or "ImplicitDeny"."""
    allowed = False
    for st in statements:
        if not _applies(st, req):
            continue
        if st["Effect"] == "Deny":
            return "Deny"
        allowed = True
    return "Allow" if allowed else "ImplicitDeny"


def decide_s3(identity: list[dict[str, Any]], bucket_policy: list[dict[str, Any]], req: Request) -> str:
    """A request of a principal of the bucket owner's account: an explicit Deny in either policy
    wins, else an Allow in either suffices (another account's principal needs both, and the
    bucket policies here deny it outright)."""
    one, other = decide(identity, req), decide(bucket_policy, req)
    if "Deny" in (one, other):
        return "Deny"
    return "Allow" if "Allow" in (one, other) else "ImplicitDeny"
