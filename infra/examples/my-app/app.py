#!/usr/bin/env python3
"""A CDK app of your own that deploys cachewarm beside your memcached replicas.

    pip install cachewarm_cdk-<version>-py3-none-any.whl   # `make dist` in a cachewarm checkout builds it
    cdk synth                                              # or: python3 app.py

Nothing here refers to the cachewarm repository: the construct deploys the ASL, Lambda code, SSM
documents, dumper and agent packaged in the wheel. tests/infra/test_installed_package.py runs this file
against the installed wheel, from a directory outside the repository.
"""

from __future__ import annotations

from aws_cdk import App, CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from cachewarm_infra import CacheWarmer, CacheWarmerProps
from constructs import Construct


class MemcachedStack(Stack):
    """Stands for your stack: the VPC your memcached replicas run in, and cachewarm beside them."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # Yours already exists; with an existing VPC: ec2.Vpc.from_lookup(self, "Vpc", vpc_id="vpc-...").
        vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=1)
        warmer = CacheWarmer(
            self,
            "CacheWarmer",
            CacheWarmerProps(
                vpc=vpc,
                # Populators in the private subnets (else each in its source node's subnet).
                subnet_ids=[s.subnet_id for s in vpc.private_subnets],
            ),
        )
        CfnOutput(self, "StateMachineArn", value=warmer.state_machine.state_machine_arn)
        CfnOutput(self, "DashboardName", value=warmer.dashboard.dashboard_name)
        # Attach to your memcached nodes' instance role: they run the dump agent.
        CfnOutput(self, "SourceNodePolicyArn", value=warmer.agent_policy.managed_policy_arn)
        # Allow memcached's port from it on your source nodes (Verify reads them).
        CfnOutput(self, "PopulatorSecurityGroupId", value=warmer.populator_sg.security_group_id)


app = App()
MemcachedStack(app, "MyMemcached")
app.synth()
