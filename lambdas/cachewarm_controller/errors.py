"""Errors the steps raise. The class name is the Step Functions error name (Lambda's errorType), so
the ASL can Retry or Catch on it and the execution's failure cause names the problem."""

from __future__ import annotations


class ControllerError(Exception):
    """Base class: a failure the state machine reports and tears down after."""


class InvalidInputError(ControllerError):
    """The execution input is wrong; nothing has been created."""


class PlanError(ControllerError):
    """The source/destination/launch template cannot be planned (missing, not running, limits)."""


class NotNitroError(ControllerError):
    """io2 multi-attach needs Nitro-based instances."""


class AttachmentLimitError(ControllerError):
    """An io2 multi-attach volume can be attached to at most 16 Nitro instances."""


class ResourceFailedError(ControllerError):
    """A volume or instance went into a failed state (error, terminated, ...)."""


class TransportError(ResourceFailedError):
    """The S3 transport's bucket cannot be made or reached (taken by another account, ...)."""


class WaitTimedOutError(ControllerError):
    """A bounded wait loop (volumes, populators, attachments, teardown) ran out of attempts."""


class AgentInstallError(ControllerError):
    """The agent could not be installed on an instance, or reports another version than this
    deployment's (a revive cannot fix that)."""


class NodeFailedError(ControllerError):
    """A node's agent failed (or went stale) more often than the revive limit allows."""


class WarmTimedOutError(ControllerError):
    """The warm ran past its deadline."""


class VerifyFailedError(ControllerError):
    """The sampled verification found a node whose populate does not match its dump."""


class TransientError(ControllerError):
    """Throttling or a transient AWS error that outlasted botocore's own retries; the ASL retries it."""
