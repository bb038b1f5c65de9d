"""``mqtt://HOST[:PORT]/TOPIC``: the app's events (every record of ``events.jsonl``) published as JSON to a broker.

Through paho-mqtt (``pip install paho-mqtt==2.2.0``), imported when the sink opens.  The broker is reached when
the sink is created (a wrong host fails before any frame, with one line naming it); afterwards paho's network
thread sends and reconnects on its own.  Never stalls the pipeline: messages wait in paho's queue of at most
``max_queued`` (QoS 1, the default, is acknowledged by the broker; ``?qos=0`` sends and forgets); when the queue
is full or the broker is gone with QoS 0, the event is dropped and counted in ``dropped``.  ``events.jsonl``
still holds every event.
"""

import json
import threading
import uuid
from typing import Any, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlparse

from jetforge.apps.video.sinks.file import _json_default
from jetforge.errors import ConfigError, StreamError
from jetforge.optional import require

DEFAULT_PORT = 1883


def parse_mqtt_uri(uri: str) -> Tuple[str, int, str, int]:
    """``mqtt://host[:port]/a/b?qos=0`` -> (host, port, "a/b", qos)."""
    parsed = urlparse(uri)
    if not parsed.hostname:
        raise ConfigError("MQTT output %r names no broker" % uri, hint="e.g. mqtt://127.0.0.1/jetforge/events")
    topic = parsed.path.lstrip("/")
    if not topic or "+" in topic or "#" in uri:  # urlparse reads "#" as a fragment: look at the whole URI
        raise ConfigError("MQTT output %r needs a topic to publish to, without wildcards (+, #)" % uri,
                          hint="e.g. mqtt://%s/jetforge/events" % parsed.hostname)
    try:
        port = parsed.port or DEFAULT_PORT
    except ValueError:
        raise ConfigError("MQTT output %r: the port must be a number 1-65535" % uri) from None
    query = parse_qs(parsed.query)
    unknown = sorted(set(query) - {"qos"})
    if unknown:
        raise ConfigError("MQTT output %r: unknown option %r" % (uri, unknown[0]), hint="the only option is ?qos=0|1")
    qos_text = query.get("qos", ["1"])[-1]
    if qos_text not in ("0", "1"):
        raise ConfigError("MQTT output %r: qos must be 0 or 1, got %r" % (uri, qos_text))
    return parsed.hostname, port, topic, int(qos_text)


class MqttSink:
    """Events -> an MQTT topic as JSON (see the module)."""

    kind = "mqtt"

    def __init__(self, uri: str, max_queued: int = 1000, connect_timeout_s: float = 5.0,
                 client_id: Optional[str] = None) -> None:
        mqtt = require("paho.mqtt.client", "publishing events to MQTT")
        self.uri = uri
        self.host, self.port, self.topic, self.qos = parse_mqtt_uri(uri)
        self.published = 0
        self.dropped = 0
        self.disconnects = 0
        self._connected = threading.Event()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                   client_id=client_id or "jetforge-%s" % uuid.uuid4().hex[:8])
        self._client.max_queued_messages_set(int(max_queued))
        self._client.max_inflight_messages_set(100)
        self._client.reconnect_delay_set(min_delay=1, max_delay=10)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._ok = mqtt.MQTT_ERR_SUCCESS
        try:
            self._client.connect(self.host, self.port, keepalive=30)
        except (OSError, ValueError) as err:
            raise StreamError("cannot reach the MQTT broker %s:%d for %s: %s"
                              % (self.host, self.port, uri, getattr(err, "strerror", None) or err),
                              hint="start the broker (e.g. mosquitto) or fix the address in --output") from None
        self._client.loop_start()
        if not self._connected.wait(connect_timeout_s):
            self._client.loop_stop()
            raise StreamError("the MQTT broker %s:%d did not accept the connection within %.0f s"
                              % (self.host, self.port, connect_timeout_s),
                              hint="check the broker's log (does it allow this client?)")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if not getattr(reason, "is_failure", False):
            self._connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connected.clear()
        self.disconnects += 1

    def write_event(self, record: Dict[str, Any]) -> None:
        """Queue one event for the broker; never waits (a full queue or no connection with QoS 0 drops it)."""
        payload = json.dumps(record, default=_json_default, separators=(",", ":"))
        try:
            info = self._client.publish(self.topic, payload, qos=self.qos)
        except (OSError, ValueError):
            self.dropped += 1
            return
        if info.rc == self._ok:
            self.published += 1
        else:  # MQTT_ERR_QUEUE_SIZE, MQTT_ERR_NO_CONN
            self.dropped += 1

    def report(self) -> Dict[str, Any]:
        """This sink's part of ``metrics.json``."""
        return {"uri": self.uri, "kind": self.kind, "topic": self.topic, "qos": self.qos, "events": self.published,
                "dropped": self.dropped, "disconnects": self.disconnects}

    def close(self, flush_s: float = 2.0) -> None:
        """Give queued events up to ``flush_s`` seconds to leave, then disconnect."""
        if self._client is None:
            return
        client, self._client = self._client, None
        if self._connected.is_set():
            try:
                client.publish(self.topic + "/status", json.dumps({"type": "end"}), qos=self.qos).wait_for_publish(
                    flush_s)  # the queue is FIFO: once this one left, every earlier event has
            except (RuntimeError, ValueError, OSError):
                pass
        client.disconnect()
        client.loop_stop()

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close(flush_s=0.5)

    def __enter__(self) -> "MqttSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["MqttSink", "parse_mqtt_uri"]
