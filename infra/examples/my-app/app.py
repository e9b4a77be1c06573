#!/usr/bin/env python3
"""A CDK app of your own that deploys cachewarm beside your memcached replicas.

    pip install cachewarm_cdk-<version>-py3-none-any.whl   # `make dist` in a cachewarm checkout builds it
    cdk synth                                              # or: python3 app.py

Nothing here refers to the cachewarm repository: the construct deploys the ASL, Lambda code, SSM
documents, dumper and agent packaged in the wheel. tests/infra/test_installed_package.py runs this file
against the installed wheel `make dist` built, from a directory outside the repository.
"""

from __future__ import annotations

from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from cachewarm_infra import CacheWarmer, CacheWarmerProps, add_outputs
from constructs import Construct


class MemcachedStack(Stack):
    """Stands for your stack: the VPC your memcached replicas run in, and cachewarm beside them."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # Yours already exist; with an existing VPC: ec2.Vpc.from_lookup(self, "Vpc", vpc_id="vpc-..."),
        # and your replicas' group: ec2.SecurityGroup.from_security_group_id(self, "Replicas", "sg-...").
        vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=1)
        replicas = ec2.SecurityGroup(self, "Replicas", vpc=vpc, description="memcached replicas")
        warmer = CacheWarmer(
            self,
            "CacheWarmer",
            CacheWarmerProps(
                vpc=vpc,
                # Populators in the private subnets (else each in its source node's subnet).
                subnet_ids=[s.subnet_id for s in vpc.private_subnets],
                # The only memcached the populators may reach: the destination replicas' groups
                # (populate) and the sources' (Verify reads a sample). Here one group holds both.
                destination_security_groups=[replicas],
                source_security_groups=[replicas],
            ),
        )
        # And the replicas admit the populators on memcached's port.
        replicas.add_ingress_rule(warmer.populator_sg, ec2.Port.tcp(11211), "cachewarm populators")
        # StateMachineArn, PopulatorLaunchTemplateId (every start input names it), WarmEventBusName
        # (Replica Deployed events), SourceNodePolicyArn (attach it to your memcached nodes' role),
        # PopulatorSecurityGroupId, the document names, DashboardName, …: docs/deploy.md lists them.
        add_outputs(self, warmer)


app = App()
MemcachedStack(app, "MyMemcached")
app.synth()
