"""Observability: the agents' command-output log group, the alarms (state machine outcomes, revived
agents, teardown leftovers) and the dashboard (rates, nodes, executions, per-node progress)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from cachewarm_infra.props import CacheWarmerProps

# The per-node progress line CheckProgress logs once per node and poll (handlers._log_node) and the
# fields of it the dashboard reads (tests check that check_progress emits each).
NODE_PROGRESS_MESSAGE = "node progress"
NODE_PROGRESS_FIELDS = (
    "node_id",
    "populate_state",
    "dump_state",
    "items",
    "bytes",
    "files",
    "still_s",
    # The dumper's pace: items/s read from the source, its limit now (0 = none), backing off (0/1).
    "dump_items_per_s",
    "dump_limit_items_per_s",
    "dump_backing_off",
    # What the source's clients feel: the guard's probes' p99 (last second; a done dump: the median of
    # its 1-s windows), the same with no dump, and the time it spent backed off.
    "dump_probe_p99_us",
    "dump_probe_baseline_us",
    "dump_backed_off_ms",
)


def build_agent_log_group(
    scope: Construct, props: CacheWarmerProps, key: kms.IKey | None = None
) -> logs.LogGroup:
    """Where SSM writes every agent command's stdout/stderr (streams `<command id>/<instance id>/…`),
    encrypted with `key`."""
    return logs.LogGroup(
        scope,
        "AgentOutputLogs",
        retention=props.log_retention,
        removal_policy=RemovalPolicy.DESTROY,
        encryption_key=key,
    )


NAMESPACE = "CacheWarm"
SERVICE = "cachewarm"
# The handlers emit every metric twice in one EMF record: with (service, Step) — all warms together,
# what the alarms watch, so they fire for any warm — and with (service, Step, WarmId) — one series per
# warm, what the dashboard's per-warm graphs and its warm-id variable use.
WARM_ID = "WarmId"
# CloudWatch's dynamic label: each SEARCH series is named after its warm id.
WARM_ID_LABEL = "${PROP('Dim.WarmId')}"
# Shown in the per-warm widgets until the dashboard's variable picks a warm id.
NO_WARM = "pick-a-warm-id"


def warm_metric(name: str, step: str, statistic: str = "Sum", warm_id: str | None = None) -> cw.Metric:
    """A metric the controller's handlers emit with Powertools (EMF): namespace CacheWarm,
    dimensions service=cachewarm and Step=<handler name> (+ WarmId=<warm_id>: one warm's series)."""
    dims = {"service": SERVICE, "Step": step}
    if warm_id is not None:
        dims[WARM_ID] = warm_id
    return cw.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map=dims,
        statistic=statistic,
        period=Duration.minutes(1),
    )


def per_warm_search(name: str, step: str, statistic: str) -> str:
    """SEARCH for `name`'s series of every warm (one line each, labelled with its warm id)."""
    return (
        f'SEARCH(\'{{{NAMESPACE},{WARM_ID},Step,service}} MetricName="{name}" Step="{step}" '
        f"service=\"{SERVICE}\"', '{statistic}', 60)"
    )


def warm_id_variable() -> cw.DashboardVariable:
    """The dashboard's "Warm id" selector: the warm ids CheckProgress reported, for the one-warm row."""
    return cw.DashboardVariable(
        id="warmId",
        type=cw.VariableType.PROPERTY,
        label="Warm id",
        input_type=cw.VariableInputType.SELECT,
        value=WARM_ID,
        values=cw.Values.from_search_components(
            namespace=NAMESPACE,
            dimensions=[WARM_ID, "Step", "service"],
            metric_name="ItemsPopulated",
            populate_from=WARM_ID,
        ),
        default_value=cw.DefaultValue.FIRST,
    )


def build_alarm_topic(scope: Construct, key: kms.IKey) -> sns.Topic:
    """The alarms' topic when the props name none (output AlarmTopicArn: subscribe to it)."""
    return sns.Topic(scope, "AlarmTopic", display_name="cachewarm alarms", master_key=key, enforce_ssl=True)


def build_alarms(
    scope: Construct,
    state_machine: sfn.StateMachine,
    teardown_machine: sfn.StateMachine,
    topic: sns.ITopic,
    dead_letters: sqs.IQueue,
) -> list[cw.Alarm]:
    """The alarms, every one with `topic` as its action (an alarm nobody hears is no safety net)."""
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
        (
            "TriggerDeadLetters",
            dead_letters.metric_approximate_number_of_messages_visible(period=five, statistic="Maximum"),
            "an event could not start its state machine (a warm or a teardown did not run): it waits in "
            "the trigger dead-letter queue",
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
    """Every warm of the time range, one line each (SEARCH over the WarmId dimension: two warms at
    once are told apart, the latest is the newest line); one warm picked with the "Warm id" variable;
    executions; per-node progress; agent output; alarms."""
    sm = state_machine
    minute = Duration.minutes(1)

    def search(name: str, step: str, statistic: str, rate: bool = False) -> cw.MathExpression:
        expr = per_warm_search(name, step, statistic)
        return cw.MathExpression(
            expression=f"RATE({expr})" if rate else expr,
            using_metrics={},
            label=WARM_ID_LABEL,
            period=minute,
        )

    dash = cw.Dashboard(
        scope, "Dashboard", default_interval=Duration.hours(12), variables=[warm_id_variable()]
    )
    # CheckProgress reports running totals (items and bytes populated so far): rates are RATE().
    dash.add_widgets(
        cw.GraphWidget(
            title="Items/s written to the destination, per warm",
            left=[search("ItemsPopulated", "check_progress", "Maximum", rate=True)],
            width=12,
        ),
        cw.GraphWidget(
            title="Bytes/s written, per warm",
            left=[search("BytesPopulated", "check_progress", "Maximum", rate=True)],
            width=12,
        ),
    )
    dash.add_widgets(
        cw.GraphWidget(
            title="Nodes done, per warm",
            left=[search("NodesDone", "check_progress", "Maximum")],
            width=12,
        ),
        cw.GraphWidget(
            title="Agents revived, per warm",
            left=[search("Revives", "check_progress", "Sum")],
            width=12,
        ),
    )
    # Protecting the sources: the dumpers' read rate, and how many back off because the sources' live
    # clients would feel the dump (the adaptive guard, docs/performance.md "Protecting the source").
    dash.add_widgets(
        cw.GraphWidget(
            title="Items/s read from the sources (dumps running), per warm",
            left=[search("DumpItemsPerSecond", "check_progress", "Maximum")],
            width=12,
        ),
        cw.GraphWidget(
            title="Dumps backing off to spare the source's clients, per warm",
            left=[search("DumpsBackingOff", "check_progress", "Maximum")],
            width=12,
        ),
    )
    # One warm: the dashboard's "Warm id" variable sets WarmId in these metrics.
    one = {
        name: warm_metric(name, step, stat, warm_id=NO_WARM)
        for name, step, stat in (
            ("ItemsPopulated", "check_progress", "Maximum"),
            ("BytesPopulated", "check_progress", "Maximum"),
            ("SourceNodes", "plan", "Maximum"),
            ("NodesDone", "check_progress", "Maximum"),
            ("Revives", "check_progress", "Sum"),
        )
    }
    dash.add_widgets(
        cw.GraphWidget(
            title="The chosen warm (Warm id above): items/s, and totals",
            left=[
                cw.MathExpression(
                    expression="RATE(items)",
                    using_metrics={"items": one["ItemsPopulated"]},
                    label="items/s",
                    period=minute,
                )
            ],
            right=[one["ItemsPopulated"], one["BytesPopulated"]],
            width=12,
        ),
        cw.GraphWidget(
            title="The chosen warm: source nodes / done / revived",
            left=[one["SourceNodes"], one["NodesDone"], one["Revives"]],
            width=12,
        ),
    )
    dash.add_widgets(
        cw.GraphWidget(
            title="Executions (all warms)",
            left=[sm.metric_started(), sm.metric_succeeded(), sm.metric_failed(), sm.metric_timed_out()],
            width=24,
        ),
    )
    progress = functions.get("CheckProgress")
    if progress is not None:
        # Per-node progress: CheckProgress logs one structured line per node and poll
        # (NODE_PROGRESS_FIELDS, message NODE_PROGRESS_MESSAGE); this shows the latest of each.
        dash.add_widgets(
            cw.LogQueryWidget(
                title="Per-node progress by warm id (latest CheckProgress poll; still_s = seconds without"
                " progress; dump_backing_off = 1 while the dumper spares its source's clients;"
                " probe_p99_us vs probe_baseline_us = the source's tail during the dump vs without it)",
                log_group_names=[progress.log_group.log_group_name],
                query_lines=[
                    f"fields @timestamp, correlation_id, {', '.join(NODE_PROGRESS_FIELDS)}",
                    f'filter message = "{NODE_PROGRESS_MESSAGE}"',
                    "stats latest(populate_state) as populate, latest(dump_state) as dump,"
                    " max(items) as items, max(bytes) as bytes, max(files) as files,"
                    " latest(still_s) as still_s, latest(dump_items_per_s) as dump_items_per_s,"
                    " latest(dump_limit_items_per_s) as dump_limit_items_per_s,"
                    " latest(dump_backing_off) as dump_backing_off,"
                    " latest(dump_probe_p99_us) as probe_p99_us,"
                    " latest(dump_probe_baseline_us) as probe_baseline_us,"
                    " latest(dump_backed_off_ms) as backed_off_ms by correlation_id, node_id",
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
