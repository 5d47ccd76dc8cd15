"""A real Home Assistant for the `make test-ha` tier and the `ha-scale` bench (docs/testing.md "Home Assistant").

Everything runs on loopback: a Mosquitto broker started here, the switchyard process (or the demo), and Home
Assistant Core from the venv the Makefile makes (.build/ha-venv). Home Assistant's MQTT integration is set up
by writing its config entry to .storage before it starts (as its config flow would store it), and an owner is
made through its onboarding API, whose token reads the state machine (REST) and the entity registry
(WebSocket).
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import aiohttp
import paho.mqtt.client as mqtt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".build", "ha-venv")
BIN = os.environ.get("SWITCHYARD_BIN_DIR", os.path.join(ROOT, ".build", "debug"))
DEADLINE = float(os.environ.get("SWITCHYARD_HA_TIMEOUT", "300"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(what, condition, timeout=DEADLINE, every=0.5):
    """Polls `condition` (bounded in time); returns its last truthy value or raises with `what`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Broker:
    """Mosquitto on a free loopback port, configured as Mosquitto ships (its default queue limits)."""

    def __init__(self, workdir, extra=""):
        self.port = free_port()
        conf = os.path.join(workdir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_type none\n{extra}\n")
        self.proc = subprocess.Popen(["mosquitto", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until("mosquitto", self._answers, timeout=10, every=0.1)

    def _answers(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class Watcher:
    """A paho client on the broker: the latest retained payload of every topic under `filters`, a count of
    the messages on the discovery prefix (what the bridge sent Home Assistant), and when Home Assistant's
    birth (`homeassistant/status` `online`) came (`time.monotonic()`; both since `reset_count`)."""

    def __init__(self, port, filters):
        self.lock = threading.Lock()
        self.latest = {}
        self.discovery_messages = 0
        self.birth = None
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"watch-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._message
        self.client.on_connect = lambda c, u, f, rc, p: [c.subscribe(t, qos=1) for t in filters]
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, client, userdata, msg):
        with self.lock:
            if msg.topic.startswith("homeassistant/") and msg.topic != "homeassistant/status":
                self.discovery_messages += 1
            elif msg.topic == "homeassistant/status" and msg.payload == b"online" and self.birth is None:
                self.birth = time.monotonic()
            self.latest[msg.topic] = msg.payload

    def snapshot(self):
        with self.lock:
            return dict(self.latest)

    def reset_count(self):
        with self.lock:
            self.discovery_messages = 0
            self.birth = None

    def publish(self, topic, payload, retain=False):
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


class Bridge:
    """The switchyard process with `lights` virtual devices of `kind` (`light`, named l0, l1…; `multisensor`,
    named m0, m1…), or the demo (`switchyard-sim demo`)."""

    def __init__(self, workdir, port, base, mode, lights=None, log_name="bridge.log", kind="light"):
        self.log = os.path.join(workdir, log_name)
        self.out = open(self.log, "a")
        if lights is None:
            args = [os.path.join(BIN, "switchyard-sim"), "demo", "--port", str(port), "--base-topic", base, "--web", "off",
                    "--discovery-mode", mode, "--log-level", "warning"]
        else:
            config = os.path.join(workdir, f"{base}-{mode}.yaml")
            with open(config, "w") as f:
                f.write(f"log: {{level: warning}}\nmqtt:\n  url: mqtt://127.0.0.1:{port}\n  base_topic: {base}\n"
                        f"web: {{enabled: false}}\nhomeassistant: {{discovery_mode: {mode}}}\nvirtual:\n"
                        # Sensors keep their first readings: no drift while Home Assistant is measured.
                        f"  sensor_interval: 86400\n  devices:\n")
                for i in range(lights):
                    f.write(f"    - {{name: {kind[0]}{i}, type: {kind}}}\n")
            args = [os.path.join(BIN, "switchyard"), "run", "-c", config]
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self.out.close()


class HomeAssistant:
    """Home Assistant Core with recorder and history, its MQTT integration on `broker_port`."""

    def __init__(self, workdir, broker_port):
        self.dir = os.path.join(workdir, "ha")
        self.port = free_port()
        self.log = os.path.join(self.dir, "home-assistant.log")
        os.makedirs(os.path.join(self.dir, ".storage"), exist_ok=True)
        with open(os.path.join(self.dir, "configuration.yaml"), "w") as f:
            f.write(f"""homeassistant:
  name: Test
  latitude: 0
  longitude: 0
  elevation: 0
  unit_system: metric
  time_zone: UTC
  currency: EUR
  country: FR
  language: en
http:
  server_host: 127.0.0.1
  server_port: {self.port}
onboarding:
recorder:
  commit_interval: 1
history:
logger:
  default: info
""")
        # The MQTT config entry as the integration's config flow stores it (version 1.2: broker in data,
        # discovery in options).
        now = "2025-01-01T00:00:00+00:00"
        entry = {"created_at": now, "data": {"broker": "127.0.0.1", "port": broker_port}, "discovery_keys": {}, "disabled_by": None,
                 "domain": "mqtt", "entry_id": uuid.uuid4().hex, "minor_version": 2, "modified_at": now,
                 "options": {"discovery": True, "discovery_prefix": "homeassistant"}, "pref_disable_new_entities": False,
                 "pref_disable_polling": False, "source": "user", "subentries": [], "title": "127.0.0.1", "unique_id": None, "version": 1}
        with open(os.path.join(self.dir, ".storage", "core.config_entries"), "w") as f:
            json.dump({"version": 1, "minor_version": 5, "key": "core.config_entries", "data": {"entries": [entry]}}, f)
        self.proc = None
        self.token = None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.started = time.monotonic()
        self.proc = subprocess.Popen([os.path.join(VENV, "bin", "hass"), "-c", self.dir, "--skip-pip", "--log-file", self.log],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until("Home Assistant's HTTP server", self._answers, every=0.2)
        self.token = self._onboard() if self.token is None else self._login()
        return self

    def _answers(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"Home Assistant exited with {self.proc.returncode}; see {self.log}")
        try:
            urllib.request.urlopen(self.base + "/api/onboarding", timeout=5).read()
            return True
        except urllib.error.HTTPError:
            return True   # answering (onboarded already: its API is closed)
        except Exception:
            return False

    def _request(self, path, data=None, form=False, token=True):
        headers = {}
        if token and self.token:
            headers["Authorization"] = "Bearer " + self.token
        body = None
        if data is not None:
            if form:
                body = urllib.parse.urlencode(data).encode()
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            else:
                body = json.dumps(data).encode()
                headers["Content-Type"] = "application/json"
        with urllib.request.urlopen(urllib.request.Request(self.base + path, body, headers), timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def _onboard(self):
        """The owner, made through onboarding (a fresh Home Assistant has none), and a token for it."""
        client = self.base + "/"
        code = self._request("/api/onboarding/users", {"client_id": client, "name": "Test", "username": "test",
                                                       "password": "switchyard-test", "language": "en"}, token=False)["auth_code"]
        return self._token(code)

    def _login(self):
        client = self.base + "/"
        flow = self._request("/auth/login_flow", {"client_id": client, "handler": ["homeassistant", None], "redirect_uri": client}, token=False)
        done = self._request(f"/auth/login_flow/{flow['flow_id']}", {"client_id": client, "username": "test", "password": "switchyard-test"},
                             token=False)
        return self._token(done["result"])

    def _token(self, code):
        return self._request("/auth/token", {"grant_type": "authorization_code", "code": code, "client_id": self.base + "/"},
                             form=True, token=False)["access_token"]

    def states(self):
        return {s["entity_id"]: s for s in self._request("/api/states")}

    def call(self, domain, service, data):
        """A service call (REST `POST /api/services/<domain>/<service>`), as a dashboard or an automation makes it."""
        return self._request(f"/api/services/{domain}/{service}", data)

    def history(self, entity_id, since_iso):
        q = urllib.parse.urlencode({"filter_entity_id": entity_id, "minimal_response": "", "no_attributes": ""})
        return (self._request(f"/api/history/period/{urllib.parse.quote(since_iso)}?{q}") or [[]])[0]

    def entity_registry(self):
        """The entity registry (WebSocket `config/entity_registry/list`)."""
        async def fetch():
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(self.base + "/api/websocket") as ws:
                    await ws.receive_json()
                    await ws.send_json({"type": "auth", "access_token": self.token})
                    assert (await ws.receive_json())["type"] == "auth_ok"
                    await ws.send_json({"id": 1, "type": "config/entity_registry/list"})
                    while True:
                        msg = await ws.receive_json()
                        if msg.get("id") == 1:
                            return msg["result"]
        return asyncio.run(fetch())

    def cpu_seconds(self):
        """Home Assistant's CPU time so far (user + system, /proc/<pid>/stat)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_problems(self, needles):
        """WARNING and ERROR lines of Home Assistant's log (with what follows them) that mention any of `needles`."""
        if not os.path.exists(self.log):
            return []
        problems, current = [], None
        with open(self.log, errors="replace") as f:
            for line in f:
                if line[:4].isdigit():
                    if current and any(n in current for n in needles):
                        problems.append(current)
                    current = line if (" WARNING " in line or " ERROR " in line) else None
                elif current is not None:
                    current += line
        if current and any(n in current for n in needles):
            problems.append(current)
        return problems


def expected_entities(snapshot, node_prefix):
    """unique_id → (component, the device's availability topic or None) of every entity this bridge's retained
    discovery configs announce, per device or per entity."""
    out = {}
    for topic, payload in snapshot.items():
        parts = topic.split("/")
        if not payload or parts[0] != "homeassistant" or len(parts) < 4 or not parts[2].startswith(node_prefix):
            continue
        config = json.loads(payload)
        if parts[1] == "device" and len(parts) == 4:
            for c in config.get("components", {}).values():
                if "unique_id" in c:
                    out[c["unique_id"]] = (c["platform"], availability_topic(c.get("availability") or config.get("availability")))
        elif len(parts) == 5 and "unique_id" in config:
            out[config["unique_id"]] = (parts[1], availability_topic(config.get("availability")))
    return out


def main_entities(snapshot, node_prefix):
    """state topic → unique_id of the main entity (a light, switch or scene: commanded on the device's own `/set`)
    of every device this bridge's retained discovery configs announce, per device or per entity."""
    out = {}
    for topic, payload in snapshot.items():
        parts = topic.split("/")
        if not payload or parts[0] != "homeassistant" or len(parts) < 4 or not parts[2].startswith(node_prefix):
            continue
        config = json.loads(payload)
        entities = list(config.get("components", {}).values()) if parts[1] == "device" and len(parts) == 4 else [config]
        for c in entities:
            command = c.get("command_topic") or ""
            if "unique_id" in c and command.endswith("/set"):
                out[command[:-len("/set")]] = c["unique_id"]
    return out


def availability_topic(availability):
    topics = [a["topic"] for a in availability or [] if not a["topic"].endswith("/bridge/state")]
    return topics[0] if topics else None


def workdir(name):
    return tempfile.mkdtemp(prefix=f"switchyard-{name}-")


def cleanup(path):
    if os.environ.get("SWITCHYARD_HA_KEEP") != "1":
        shutil.rmtree(path, ignore_errors=True)
