"""An MQTT 5 client as users write one (paho-mqtt 2.x, MQTTv5) against a running Switchyard bridge.

Each request and command carries a Response Topic and Correlation Data; each answer must arrive on that
topic with that Correlation Data. Run by PahoV5Tests (Tests/SwitchyardIntegrationTests) from the venv
`make test` makes (.build/mqtt-venv). Prints one line per check, then "all checks passed"; exits 1 on the
first failure. Every wait is bounded.
"""
import argparse
import json
import queue
import sys
import uuid

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--base", required=True)
parser.add_argument("--device", default="test/lamp")
args = parser.parse_args()

reply = f"paho/{uuid.uuid4().hex[:8]}/reply"
answers: "queue.Queue[mqtt.MQTTMessage]" = queue.Queue()
subscribed = queue.Queue()
connected = queue.Queue()


def on_connect(client, userdata, flags, reason_code, properties):
    connected.put(reason_code)


def on_subscribe(client, userdata, mid, reason_codes, properties):
    subscribed.put(reason_codes)


def on_message(client, userdata, message):
    if message.topic == reply:
        answers.put(message)


client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"paho-{uuid.uuid4().hex[:8]}", protocol=mqtt.MQTTv5)
client.on_connect = on_connect
client.on_subscribe = on_subscribe
client.on_message = on_message
client.connect("127.0.0.1", args.port, keepalive=30)
client.loop_start()


def fail(message):
    print(f"FAILED: {message}", flush=True)
    client.loop_stop()
    sys.exit(1)


try:
    code = connected.get(timeout=20)
except queue.Empty:
    fail("no CONNACK within 20 s")
if code.is_failure:
    fail(f"connection refused: {code}")
client.subscribe(reply, qos=1)
try:
    subscribed.get(timeout=20)
except queue.Empty:
    fail("no SUBACK within 20 s")


def ask(topic, payload, name):
    """Publishes with a Response Topic and fresh Correlation Data; returns the answer's JSON."""
    correlation = uuid.uuid4().bytes
    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = reply
    props.CorrelationData = correlation
    client.publish(topic, payload, qos=1, properties=props)
    try:
        while True:
            m = answers.get(timeout=20)
            got = getattr(m.properties, "CorrelationData", None)
            if got == correlation:
                break
            print(f"  (an answer to another request: {got!r})", flush=True)
    except queue.Empty:
        fail(f"{name}: no answer on {reply} within 20 s")
    answer = json.loads(m.payload)
    print(f"ok: {name} -> {answer}", flush=True)
    return answer


base, device = args.base, args.device
a = ask(f"{base}/{device}/set", json.dumps({"state": "ON", "transaction": "p1"}), "/set with a transaction")
if a != {"transaction": "p1", "status": "ok"}:
    fail(f"/set answered {a}")
a = ask(f"{base}/{device}/set/brightness", "42", "/set/<field> without a transaction")
if a != {"status": "ok"}:
    fail(f"/set/brightness answered {a}")
a = ask(f"{base}/{device}/get", "", "/get")
if a.get("status") != "ok" or a.get("state", {}).get("brightness") != 42:
    fail(f"/get answered {a}")
a = ask(f"{base}/bridge/request/health_check", json.dumps({"transaction": 3}), "bridge request health_check")
if a.get("status") != "ok" or a.get("data", {}).get("healthy") is not True or a.get("transaction") != 3:
    fail(f"health_check answered {a}")
a = ask(f"{base}/{device}/set", json.dumps({"brightness": 250}), "an invalid command")
if a.get("status") != "error" or "out of range" not in a.get("error", ""):
    fail(f"the invalid command answered {a}")
a = ask(f"{base}/bridge/request/no_such_request", "", "an unknown request")
if a.get("status") != "error" or "unknown request" not in a.get("error", ""):
    fail(f"the unknown request answered {a}")

client.disconnect()
client.loop_stop()
print("all checks passed", flush=True)
