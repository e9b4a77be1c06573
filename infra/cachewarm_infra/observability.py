"""Observability: the agents' command-output log group, the alarms (state machine outcomes, revived
agents, teardown leftovers) and the dashboard (rates, nodes, executions, per-node progress)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from cachewarm_infra.props import CacheWarmerProps

# The per-node progress line CheckProgress logs once per node and poll (handlers._log_node) and the
# fields of it the dashboard reads (tests check that check_progress emits each).
NODE_PROGRESS_MESSAGE = "node progress"
NODE_PROGRESS_FIELDS = ("node_id", "populate_state", "dump_state", "items", "bytes", "files", "still_s")


def build_agent_log_group(scope: Construct, props: CacheWarmerProps) -> logs.LogGroup:
    """Where SSM writes every agent command's stdout/stderr (streams `<command id>/<instance id>/…`)."""
    return logs.LogGroup(
        scope, "AgentOutputLogs", retention=props.log_retention, removal_policy=RemovalPolicy.DESTROY
    )


def warm_metric(name: str, step: str, statistic: str = "Sum") -> cw.Metric:
    """A metric the controller's handlers emit with Powertools (EMF): namespace CacheWarm,
    dimensions service=cachewarm and Step=<handler name>."""
    return cw.Metric(
        namespace="CacheWarm",
        metric_name=name,
        dimensions_map={"service": "cachewarm", "Step": step},
        statistic=statistic,
        period=Duration.minutes(1),
    )


def build_alarms(
    scope: Construct,
    state_machine: sfn.StateMachine,
    teardown_machine: sfn.StateMachine,
    topic: sns.ITopic | None,
) -> list[cw.Alarm]:
    sm = state_machine
    five = Duration.minutes(5)
    specs = [
        (
            "ExecutionsFailed",
            sm.metric_failed(period=five),
            "a warm failed (its own teardown ran if the failure was caught; the teardown machine runs "
            "for every failed warm either way)",
        ),
        (
            "ExecutionsTimedOut",
            sm.metric_timed_out(period=five),
            "a warm timed out (the teardown machine runs)",
        ),
        (
            "ExecutionsAborted",
            sm.metric_aborted(period=five),
            "a warm was stopped (the teardown machine runs)",
        ),
        (
            # CheckProgress revives an agent whose heartbeat went stale, whose command ended, that
            # reported a failure, or whose node made no progress (stalled).
            "AgentsRevived",
            warm_metric("Revives", "check_progress").with_(period=five),
            "an agent was revived: stale heartbeat, failed agent or command, or no progress (stalled)",
        ),
        (
            "TeardownLeftovers",
            warm_metric("TeardownLeftovers", "teardown", "Maximum").with_(period=five),
            "a teardown pass still found volumes or populators of its execution (normal for a few "
            "passes; alarming when it persists: a mount that will not go, a stuck detach)",
        ),
        (
            "StoppedWarmTeardownFailed",
            teardown_machine.metric_failed(period=five),
            "the teardown machine gave up on a stopped, timed-out or failed warm: its resources may be left",
        ),
    ]
    alarms = []
    for name, metric, what in specs:
        alarm = cw.Alarm(
            scope,
            f"{name}Alarm",
            alarm_description=f"cachewarm: {what}. See docs/runbook.md.",
            metric=metric,
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        if topic is not None:
            alarm.add_alarm_action(cw_actions.SnsAction(topic))
        alarms.append(alarm)
    return alarms


def build_dashboard(
    scope: Construct,
    state_machine: sfn.StateMachine,
    functions: Mapping[str, lambda_.Function],
    alarms: Sequence[cw.IAlarm],
    agent_logs: logs.ILogGroup,
) -> cw.Dashboard:
    sm = state_machine
    minute = Duration.minutes(1)
    # CheckProgress reports running totals (items and bytes populated so far): rates are RATE().
    items = warm_metric("ItemsPopulated", "check_progress", "Maximum")
    bytes_ = warm_metric("BytesPopulated", "check_progress", "Maximum")

    def rate(name: str, metric: cw.IMetric, label: str) -> cw.MathExpression:
        return cw.MathExpression(
            expression=f"RATE({name})", using_metrics={name: metric}, label=label, period=minute
        )

    dash = cw.Dashboard(scope, "Dashboard", default_interval=Duration.hours(12))
    dash.add_widgets(
        cw.GraphWidget(
            title="Items/s written to the destination", left=[rate("items", items, "items/s")], width=12
        ),
        cw.GraphWidget(
            title="Bytes/s written, and totals",
            left=[rate("bytes", bytes_, "bytes/s")],
            right=[items, bytes_],
            width=12,
        ),
    )
    dash.add_widgets(
        cw.GraphWidget(
            title="Nodes: source nodes / done / revived",
            left=[
                warm_metric("SourceNodes", "plan", "Maximum"),
                warm_metric("NodesDone", "check_progress", "Maximum"),
                warm_metric("Revives", "check_progress"),
            ],
            width=12,
        ),
        cw.GraphWidget(
            title="Executions",
            left=[sm.metric_started(), sm.metric_succeeded(), sm.metric_failed(), sm.metric_timed_out()],
            width=12,
        ),
    )
    progress = functions.get("CheckProgress")
    if progress is not None:
        # Per-node progress: CheckProgress logs one structured line per node and poll
        # (NODE_PROGRESS_FIELDS, message NODE_PROGRESS_MESSAGE); this shows the latest of each.
        dash.add_widgets(
            cw.LogQueryWidget(
                title="Per-node progress (latest CheckProgress poll; still_s = seconds without progress)",
                log_group_names=[progress.log_group.log_group_name],
                query_lines=[
                    f"fields @timestamp, correlation_id, {', '.join(NODE_PROGRESS_FIELDS)}",
                    f'filter message = "{NODE_PROGRESS_MESSAGE}"',
                    "stats latest(populate_state) as populate, latest(dump_state) as dump,"
                    " max(items) as items, max(bytes) as bytes, max(files) as files,"
                    " latest(still_s) as still_s by correlation_id, node_id",
                    "sort correlation_id, node_id",
                ],
                width=24,
            )
        )
    dash.add_widgets(
        cw.LogQueryWidget(
            title="Agent command output (errors first)",
            log_group_names=[agent_logs.log_group_name],
            query_lines=[
                "fields @timestamp, @logStream, @message",
                "filter @logStream like /stderr/",
                "sort @timestamp desc",
                "limit 50",
            ],
            width=24,
        )
    )
    dash.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24))
    return dash
