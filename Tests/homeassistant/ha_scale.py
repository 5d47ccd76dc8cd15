"""The `ha-scale` bench (switchyard-bench --scenario ha-scale; docs/performance.md "Home Assistant at a thousand
devices"): `--devices` virtual devices of `--kind` announced to a freshly started Home Assistant, per entity and per
device in the same run, then the same Home Assistant restarted. For each: seconds from Home Assistant's start until
its state machine holds every entity of every device available (not `unavailable`, not `unknown`), Home
Assistant's CPU time over that interval, the discovery messages the bridge sent, and what the broker dropped.
Prints JSON figures."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bridge, Broker, HomeAssistant, Watcher, cleanup, expected_entities, wait_until, workdir  # noqa: E402

BASE = "sy"

# The entity ids Home Assistant gives one device of each kind (its name, e.g. `l7` or `m7`): the bridge's
# `object_id`s, the device's name for its main entity and the name plus the field for each other one.
KINDS = {
    "light": lambda name: [f"light.{name}"],
    "multisensor": lambda name: [f"sensor.{name}_{f}" for f in ("temperature", "humidity", "pressure", "battery")],
}


def names(kind, count):
    """The devices' names, as harness.Bridge makes them."""
    return [f"{kind[0]}{i}" for i in range(count)]


def all_available(ha, entity_ids, marks):
    """Whether Home Assistant's state machine holds every one of `entity_ids` neither `unavailable` nor
    `unknown`; notes in `marks` when it first held all of them, whatever their state (`exist`)."""
    states = ha.states()
    if "exist" not in marks and all(e in states for e in entity_ids):
        marks["exist"] = time.monotonic()
    return all(states.get(e, {}).get("state") not in (None, "unavailable", "unknown") for e in entity_ids)


def run(mode, count, kind, say):
    d = workdir(f"ha-scale-{mode}")
    broker = Broker(d)
    watch = Watcher(broker.port, ["homeassistant/#", "$SYS/broker/publish/messages/dropped"])
    bridge = Bridge(d, broker.port, BASE, mode, lights=count, kind=kind)
    ha = HomeAssistant(d, broker.port)
    entity_ids = [e for n in names(kind, count) for e in KINDS[kind](n)]
    # The figures' names for lights are those of the first runs (docs/performance.md), so they compare.
    what = f"{count} lights" if kind == "light" else f"{count} {kind}s ({len(entity_ids)} entities)"
    figures = []
    try:
        def announced():
            return len(expected_entities(watch.snapshot(), f"switchyard_{BASE}_")) >= len(entity_ids)
        wait_until("the bridge's discovery configs", announced)
        time.sleep(2)
        figures.append((f"{mode}: discovery messages announcing {what}", watch.discovery_messages, "msgs"))
        for phase in ("fresh start", "restart"):
            if phase == "restart":
                ha.stop()
            watch.reset_count()
            dropped = float(watch.snapshot().get("$SYS/broker/publish/messages/dropped", b"0"))
            start = time.monotonic()
            marks = {}
            ha.start()
            wait_until(f"{what} available", lambda: all_available(ha, entity_ids, marks), every=1)
            seconds = time.monotonic() - start
            cpu = ha.cpu_seconds()
            time.sleep(11)   # the broker's $SYS counters are updated every 10 s
            lost = float(watch.snapshot().get("$SYS/broker/publish/messages/dropped", b"0")) - dropped
            say(f"ha-scale {kind} {mode} {phase}: {seconds:.1f} s, HA CPU {cpu:.1f} s, {watch.discovery_messages} discovery msgs, {lost:.0f} dropped")
            # Where the interval goes: Home Assistant making the entities (at a restart its registry restores
            # them at once, as unavailable, so only a fresh start says it), then its birth.
            if phase == "fresh start":
                figures.append((f"{mode}, HA {phase}: HA start → every entity in its state machine", marks["exist"] - start, "s"))
            if watch.birth is not None:
                figures.append((f"{mode}, HA {phase}: HA start → its birth (homeassistant/status online)", watch.birth - start, "s"))
            figures += [
                (f"{mode}, HA {phase}: HA start → {what} available", seconds, "s"),
                (f"{mode}, HA {phase}: HA CPU time over that interval", cpu, "s"),
                (f"{mode}, HA {phase}: discovery messages the bridge sent (re-announcement on HA's birth)", watch.discovery_messages, "msgs"),
                (f"{mode}, HA {phase}: messages the broker dropped for its clients", lost, "msgs"),
            ]
        problems = ha.log_problems([f"switchyard_{BASE}_", f" {BASE}/", "Switchyard"])
        figures.append((f"{mode}: warnings and errors about the bridge's configs in HA's log", len(problems), "lines"))
    finally:
        ha.stop()
        bridge.stop()
        watch.stop()
        broker.stop()
        cleanup(d)
    return figures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", "--lights", dest="devices", type=int, default=1000, help="virtual devices of --kind")
    p.add_argument("--kind", choices=sorted(KINDS), default="light",
                   help="light: one entity a device; multisensor: four (temperature, humidity, pressure, battery)")
    p.add_argument("--modes", default="entity,device")
    a = p.parse_args()
    out = []
    for mode in a.modes.split(","):
        out += run(mode, a.devices, a.kind, lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps([{"name": n, "value": v, "unit": u} for n, v, u in out]))


if __name__ == "__main__":
    main()
