"""``serve dataplane``'s embedded wiring: uploads of meta segments and value packs through the
directory bucket each put exactly one S3 event on the SQLite queue; other kinds put none."""

from __future__ import annotations

from gateway_rig import GatewayRig, five_kinds, http_put, request_body

from baml_studio.objectstore.notifications import parse_s3_event


def test_gateway_meta_and_pack_notify_once(dir_rig: GatewayRig) -> None:
    assert dir_rig.queue is not None
    flush = five_kinds()
    answer = dir_rig.authorize(request_body([e for e, _ in flush])).json()["objects"]
    for obj, (_, data) in zip(answer, flush, strict=True):
        assert http_put(obj["upload_url"], data, obj["required_headers"]).status == 200
    messages = dir_rig.queue.receive(max_messages=10)
    events = [event for message in messages for event in parse_s3_event(message.body)]
    by_kind = {o["kind"]: o for o in answer}
    expected = {by_kind["meta_segment"]["key"], by_kind["value_pack"]["key"]}
    assert sorted(event.key for event in events) == sorted(expected)
    assert len(messages) == 2
    sizes = {o["key"]: len(data) for o, (_, data) in zip(answer, flush, strict=True)}
    for event in events:
        assert event.bucket == "evidence"
        assert event.size == sizes[event.key]
    # a re-authorize and a refused re-PUT send nothing more
    again = dir_rig.authorize(request_body([e for e, _ in flush])).json()["objects"]
    assert {o["state"] for o in again} == {"stored"}
    assert (
        http_put(answer[4]["upload_url"], flush[4][1], answer[4]["required_headers"]).status == 412
    )
    assert dir_rig.queue.receive(max_messages=10) == []
