"""Configure an S3 bucket to notify the projection queue (the scale-out side of the rules).

:func:`configure` installs exactly the two rules of
:data:`~baml_studio.objectstore.notifications.NOTIFICATION_RULES` (``s3:ObjectCreated:*``,
prefix ``evidence/v1/``, suffix ``.bamlmeta.zst`` or ``.bamlpack.zst``) targeting one SQS queue
ARN. Other configurations on the bucket are kept; running it again replaces our two rules.

On AWS the queue must let S3 send to it before the rules can be saved (S3 sends an
``s3:TestEvent`` to validate the destination): :func:`allow_bucket_to_send` sets that queue policy.

boto3 clients are ``Any`` at this boundary (boto3 ships no types); botocore errors become
:class:`~baml_studio.objectstore.notifications.NotificationSetupError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import botocore.exceptions  # type: ignore[import-untyped]  # reason: botocore ships no types

from baml_studio.objectstore.notifications import NOTIFICATION_RULES, NotificationSetupError

_OUR_IDS = frozenset(rule.id for rule in NOTIFICATION_RULES)
_CONFIG_KINDS = (
    "QueueConfigurations",
    "TopicConfigurations",
    "LambdaFunctionConfigurations",
    "EventBridgeConfiguration",
)
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling"}
)


def notification_rules(queue_arn: str) -> list[dict[str, Any]]:
    """The two ``QueueConfigurations`` entries for ``queue_arn``."""
    return [
        {
            "Id": rule.id,
            "QueueArn": queue_arn,
            "Events": ["s3:ObjectCreated:*"],
            "Filter": {
                "Key": {
                    "FilterRules": [
                        {"Name": "prefix", "Value": rule.prefix},
                        {"Name": "suffix", "Value": rule.suffix},
                    ]
                }
            },
        }
        for rule in NOTIFICATION_RULES
    ]


def configure(s3_client: Any, bucket: str, queue_arn: str) -> dict[str, Any]:
    """Install the two rules on ``bucket``; return the configuration that was put."""
    if not queue_arn.startswith("arn:") or ":sqs:" not in queue_arn:
        raise NotificationSetupError(
            f"queue_arn {queue_arn!r} is not an SQS queue ARN (arn:aws:sqs:<region>:<acct>:<name>)"
        )
    current = _call(bucket, s3_client.get_bucket_notification_configuration, Bucket=bucket)
    config: dict[str, Any] = {kind: current[kind] for kind in _CONFIG_KINDS if kind in current}
    others = [c for c in config.get("QueueConfigurations", []) if c.get("Id") not in _OUR_IDS]
    config["QueueConfigurations"] = others + notification_rules(queue_arn)
    _call(
        bucket,
        s3_client.put_bucket_notification_configuration,
        Bucket=bucket,
        NotificationConfiguration=config,
    )
    return config


def bucket_send_policy(queue_arn: str, bucket: str) -> str:
    """A queue policy letting S3 send events from ``bucket`` (and no other bucket) to the queue."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "baml-evidence-notifications",
                    "Effect": "Allow",
                    "Principal": {"Service": "s3.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {"ArnEquals": {"aws:SourceArn": f"arn:aws:s3:::{bucket}"}},
                }
            ],
        }
    )


def allow_bucket_to_send(sqs_client: Any, queue_url: str, queue_arn: str, bucket: str) -> None:
    """Set the queue's policy to :func:`bucket_send_policy` (replacing any other policy)."""
    _call(
        queue_url,
        sqs_client.set_queue_attributes,
        QueueUrl=queue_url,
        Attributes={"Policy": bucket_send_policy(queue_arn, bucket)},
    )


def _call(target: str, operation: Callable[..., Any], **kw: Any) -> Any:
    try:
        return operation(**kw)
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        raise NotificationSetupError(
            f"configuring notifications on {target}: {code}: {error.get('Message', '')}",
            transient=code in _TRANSIENT_CODES or status >= 500,
        ) from exc
    except botocore.exceptions.BotoCoreError as exc:
        transient = isinstance(
            exc, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError
        )
        raise NotificationSetupError(
            f"configuring notifications on {target}: {exc}", transient=transient
        ) from exc
