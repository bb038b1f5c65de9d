"""``mqtt://HOST/TOPIC`` against a real mosquitto broker started by the test on 127.0.0.1, and the app with
several outputs at once (an H.264 file, the live page, MQTT), whose MP4 then plays in headless chromium."""

import json
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

from jetforge.apps.video.sinks.mqtt import MqttSink, parse_mqtt_uri
from jetforge.cli.main import main as cli_main
from jetforge.errors import ConfigError, StreamError
from tests.apps.live_servers import chromium_page, free_port, mosquitto

mqtt = pytest.importorskip("paho.mqtt.client", reason="pip install paho-mqtt==2.2.0 (requirements/dev.lock)")


class Subscriber:
    """A second, independent client that collects what reaches the broker."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: List[Any] = []
        self.ready = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-subscriber")
        self.client.on_connect = lambda c, u, f, r, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *a: self.ready.set()
        self.client.on_message = lambda c, u, msg: self.messages.append((msg.topic, json.loads(msg.payload)))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.ready.wait(5), "the subscriber did not subscribe"

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_events_reach_the_broker_in_order_and_a_gone_broker_only_drops(tmp_path):
    with mosquitto(tmp_path) as (port, proc):
        sub = Subscriber(port, "jetforge/#")
        sink = MqttSink("mqtt://127.0.0.1:%d/jetforge/events" % port)
        sent = [{"type": "people", "frame": i, "people": i % 4, "latency_ms": 3.5} for i in range(200)]
        for record in sent:
            sink.write_event(record)
        sub.wait_for(len(sent))
        events = [m for t, m in sub.messages if t == "jetforge/events"]
        assert events == sent  # QoS 1, one connection: every event, in order, unchanged
        proc.terminate()
        proc.wait(5)
        deadline = time.monotonic() + 5
        while sink._connected.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        start = time.perf_counter()
        for i in range(2000):
            sink.write_event({"frame": i})
        elapsed = time.perf_counter() - start
        sink.close(flush_s=0.2)
        sub.close()
    report = sink.report()
    assert report["events"] == 200 and report["dropped"] == 2000 and report["disconnects"] >= 1
    assert elapsed < 2.0, elapsed  # ~10 us an event here; never waits for the gone broker


def test_a_broker_that_is_not_there_fails_when_the_output_opens():
    port = free_port()  # nothing listens there
    with pytest.raises(StreamError, match="cannot reach the MQTT broker 127.0.0.1:%d" % port):
        MqttSink("mqtt://127.0.0.1:%d/x" % port)
    assert parse_mqtt_uri("mqtt://broker/a/b?qos=0") == ("broker", 1883, "a/b", 0)
    for bad, why in (("mqtt://broker", "topic"), ("mqtt://broker/a/#", "wildcards"), ("mqtt://b/t?qos=2", "qos"),
                     ("mqtt:///t", "no broker"), ("mqtt://b/t?retain=1", "unknown option")):
        with pytest.raises(ConfigError, match=why):
            parse_mqtt_uri(bad)


def test_the_app_writes_several_outputs_at_once_and_its_mp4_plays_in_a_browser(tmp_path, capsys):
    av = pytest.importorskip("av")
    with mosquitto(tmp_path) as (port, _):
        sub = Subscriber(port, "jetforge/events")
        out = tmp_path / "run"
        code = cli_main(["app", "people", "--max-frames", "12", "--out", str(out), "-q", "--no-plots",
                         "--output", str(tmp_path / "copy.mp4"), "--output", "http://127.0.0.1:0",
                         "--output", "mqtt://127.0.0.1:%d/jetforge/events" % port])
        lines = (out / "events.jsonl").read_text().splitlines()
        sub.wait_for(len(lines))
        sub.close()
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    sinks = {s["kind"]: s for s in metrics["sinks"]}
    assert sinks["file"]["frames"] == 12 and sinks["file"]["encoder"] == "pyav-libx264"
    assert sinks["http"]["frames"] == 12 and sinks["mqtt"]["events"] == len(lines) and sinks["mqtt"]["dropped"] == 0
    assert [m for _, m in sub.messages] == [json.loads(l) for l in lines]  # events.jsonl stays, MQTT has the same
    assert metrics["video"][0]["encoder"] == "pyav-libx264"
    for path in (out / "annotated.mp4", tmp_path / "copy.mp4"):
        with av.open(str(path)) as c:
            assert c.streams.video[0].codec_context.name == "h264" and c.streams.video[0].frames == 12
    with chromium_page() as (page, errors):
        Path(out / "play.html").write_text('<video id="v" muted playsinline src="annotated.mp4"></video>')
        page.goto((out / "play.html").as_uri())
        page.wait_for_function('document.getElementById("v").readyState >= 2', timeout=10000)
        size = page.evaluate('[document.getElementById("v").videoWidth, document.getElementById("v").duration]')
        page.evaluate('document.getElementById("v").play()')
        page.wait_for_function('document.getElementById("v").currentTime > 0.1', timeout=10000)
        assert errors == []
    assert size[0] == metrics["video"][0]["size"][0] and abs(size[1] - 12 / metrics["sources"][0]["fps"]) < 0.1
