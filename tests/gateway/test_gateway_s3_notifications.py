"""The data plane's S3 wiring on ministack: verify reports missing notification rules, setup
(library, ``serve dataplane``'s start and ``baml-studio setup s3-notifications``) creates the
queue and its dead-letter queue and installs the two rules, and ``dataplane.json`` selects it."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from baml_studio.cli_gateway import EXIT_REFUSED, EXIT_RULES_MISSING, serve, setup
from baml_studio.gateway.service import (
    DataplaneConfig,
    load_dataplane_config,
    missing_notification_rules,
    open_dataplane,
    setup_s3_notifications,
    verify_s3_notifications,
)
from baml_studio.objectstore.config import S3Config
from baml_studio.objectstore.notifications import NotificationSetupError
from baml_studio.objectstore.s3_notifications import configure, notification_rules
from baml_studio.queue.config import SqsQueueConfig
from ministack_fixture import CREDENTIALS, REGION, client

RULE_IDS = ("baml-evidence-meta", "baml-evidence-pack")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_PROFILE": None}


@pytest.fixture(scope="module")
def sqs(ministack_endpoint: str) -> Any:
    return client("sqs", ministack_endpoint)


@pytest.fixture
def names(gateway_s3_client: Any) -> tuple[str, str]:
    """A fresh bucket (created) and a fresh queue name (not created)."""
    suffix = uuid.uuid4().hex[:16]
    gateway_s3_client.create_bucket(Bucket=f"wire-{suffix}")
    return f"wire-{suffix}", f"wire-{suffix}"


def _s3_config(bucket: str, endpoint: str) -> S3Config:
    return S3Config(
        bucket=bucket,
        region=REGION,
        endpoint_url=endpoint,
        access_key_id=CREDENTIALS["aws_access_key_id"],
        secret_access_key=CREDENTIALS["aws_secret_access_key"],
        max_attempts=2,
    )


def test_setup_creates_queue_with_redrive_and_installs_both_rules(
    gateway_s3_client: Any, sqs: Any, names: tuple[str, str], ministack_endpoint: str
) -> None:
    bucket, queue = names
    config = SqsQueueConfig(name=queue, region=REGION, endpoint_url=ministack_endpoint)
    status = setup_s3_notifications(gateway_s3_client, sqs, bucket, config)
    assert status.ok and status.missing == ()
    attributes = sqs.get_queue_attributes(QueueUrl=status.queue_url, AttributeNames=["All"])
    redrive = json.loads(attributes["Attributes"]["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == 8
    assert redrive["deadLetterTargetArn"].endswith(f":{queue}-dlq")
    assert status.dead_letter_url is not None and status.dead_letter_url.endswith(f"{queue}-dlq")
    policy = json.loads(attributes["Attributes"]["Policy"])
    assert policy["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"].endswith(bucket)
    stored = gateway_s3_client.get_bucket_notification_configuration(Bucket=bucket)
    assert stored["QueueConfigurations"] == notification_rules(status.queue_arn)
    again = setup_s3_notifications(gateway_s3_client, sqs, bucket, config)  # idempotent
    assert again == status


def test_verify_reports_exactly_the_missing_rules(
    gateway_s3_client: Any, sqs: Any, names: tuple[str, str], ministack_endpoint: str
) -> None:
    bucket, queue = names
    config = SqsQueueConfig(name=queue, region=REGION, endpoint_url=ministack_endpoint)
    with pytest.raises(NotificationSetupError, match=queue) as caught:
        verify_s3_notifications(gateway_s3_client, sqs, bucket, config)  # no queue yet
    assert not caught.value.transient
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    status = verify_s3_notifications(gateway_s3_client, sqs, bucket, config)
    assert status.missing == RULE_IDS and not status.ok
    assert status.queue_arn == arn and status.dead_letter_url is None
    configure(gateway_s3_client, bucket, arn)
    assert verify_s3_notifications(gateway_s3_client, sqs, bucket, config).ok
    # a rule aimed at another queue, or with another suffix, does not count
    meta, pack = notification_rules(arn)
    pack["Filter"]["Key"]["FilterRules"][1]["Value"] = ".bamldata.zst"
    gateway_s3_client.put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [meta, pack]}
    )
    assert missing_notification_rules(gateway_s3_client, bucket, arn) == ("baml-evidence-pack",)
    assert missing_notification_rules(gateway_s3_client, bucket, arn + "x") == RULE_IDS


def test_missing_bucket_is_a_terminal_setup_error(gateway_s3_client: Any) -> None:
    with pytest.raises(NotificationSetupError) as caught:
        missing_notification_rules(
            gateway_s3_client, f"absent-{uuid.uuid4().hex[:8]}", "arn:aws:sqs:us-east-1:0:q"
        )
    assert not caught.value.transient


def test_dataplane_start_verifies_or_configures(
    tmp_path: Path,
    names: tuple[str, str],
    ministack_endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket, queue = names
    s3 = _s3_config(bucket, ministack_endpoint)
    sqs_config = SqsQueueConfig(name=queue, region=REGION, endpoint_url=ministack_endpoint)
    base = {"data_dir": tmp_path / "dp", "public_base_url": "http://127.0.0.1:1", "s3": s3}
    configured = open_dataplane(
        DataplaneConfig(**base, sqs=sqs_config, s3_notifications="configure")
    )
    assert configured.notifications is not None and configured.notifications.ok
    configured.close()
    verified = open_dataplane(DataplaneConfig(**base, sqs=sqs_config))
    assert verified.notifications == configured.notifications
    assert verified.gateway.config.head_concurrency == 16  # S3: each check is a round trip
    verified.close()
    client("s3", ministack_endpoint).put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={}
    )
    with caplog.at_level(logging.ERROR, logger="baml_studio.gateway.service"):
        broken = open_dataplane(DataplaneConfig(**base, sqs=sqs_config))
    assert broken.notifications is not None and broken.notifications.missing == RULE_IDS
    assert "baml-evidence-meta" in caplog.text and "setup s3-notifications" in caplog.text
    off = open_dataplane(DataplaneConfig(**base, sqs=sqs_config, s3_notifications="off"))
    assert off.notifications is None


def test_dataplane_json_selects_the_wiring(tmp_path: Path, ministack_endpoint: str) -> None:
    data = tmp_path / "dp"
    data.mkdir()
    s3 = {"bucket": "evidence", "endpoint_url": ministack_endpoint}
    sqs_raw = {
        "name": "proj",
        "endpoint_url": ministack_endpoint,
        "settings": {"max_receive_count": 8},
    }
    (data / "dataplane.json").write_text(json.dumps({"s3": s3, "sqs": sqs_raw}))
    config = load_dataplane_config(data, host="127.0.0.1", port=1)
    assert config.s3_notifications == "verify" and config.sqs is not None
    assert config.sqs.name == "proj" and config.sqs.settings.max_receive_count == 8
    forced = load_dataplane_config(data, host="127.0.0.1", port=1, setup_s3=True)
    assert forced.s3_notifications == "configure"
    (data / "dataplane.json").write_text(json.dumps({"s3": s3, "s3_notifications": "maybe"}))
    with pytest.raises(ValueError, match="maybe"):
        load_dataplane_config(data, host="127.0.0.1", port=1)
    (data / "dataplane.json").write_text(json.dumps({"sqs": sqs_raw}))
    with pytest.raises(ValueError, match="sqs needs s3"):
        load_dataplane_config(data, host="127.0.0.1", port=1)
    (data / "dataplane.json").write_text("{}")
    result = CliRunner().invoke(serve, ["dataplane", "--data", str(data), "--setup-s3"])
    assert result.exit_code == 2 and "--setup-s3 needs" in result.output


def test_cli_setup_then_verify(
    gateway_s3_client: Any, sqs: Any, names: tuple[str, str], ministack_endpoint: str
) -> None:
    bucket, queue = names
    args = ["s3-notifications", "--endpoint-url", ministack_endpoint, "--bucket", bucket]
    args += ["--queue", queue, "--region", REGION]
    runner = CliRunner(env=AWS_ENV)
    sqs.create_queue(QueueName=queue)
    before = runner.invoke(setup, [*args, "--verify"])
    assert before.exit_code == EXIT_RULES_MISSING, before.output
    assert json.loads(before.output)["missing_rules"] == list(RULE_IDS)
    done = runner.invoke(setup, args)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["missing_rules"] == [] and report["dead_letter_url"].endswith(f"{queue}-dlq")
    after = runner.invoke(setup, [*args, "--verify"])
    assert after.exit_code == 0 and json.loads(after.output) == report
    missing = ["s3-notifications", "--endpoint-url", ministack_endpoint, "--queue", queue]
    refused = runner.invoke(setup, [*missing, "--bucket", f"absent-{uuid.uuid4().hex[:8]}"])
    assert refused.exit_code == EXIT_REFUSED and "error:" in refused.output
    bad = runner.invoke(setup, [*missing, "--bucket", "Bad_Bucket"])
    assert bad.exit_code == 2


def test_setup_help_has_examples() -> None:
    for command in (["--help"], ["s3-notifications", "--help"]):
        result = CliRunner().invoke(setup, command)
        assert result.exit_code == 0 and "Example: baml-studio setup" in result.output
    assert "--setup-s3" in CliRunner().invoke(serve, ["dataplane", "--help"]).output
