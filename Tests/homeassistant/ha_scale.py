"""The `ha-scale` bench (switchyard-bench --scenario ha-scale; docs/performance.md "Home Assistant at a thousand
devices"): `--lights` virtual lights announced to a freshly started Home Assistant, per entity and per device in
the same run, then the same Home Assistant restarted. For each: seconds from Home Assistant's start until its
state machine holds every light available (not `unavailable`, not `unknown`), Home Assistant's CPU time over
that interval, the discovery messages the bridge sent, and what the broker dropped. Prints JSON figures."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bridge, Broker, HomeAssistant, Watcher, cleanup, expected_entities, wait_until, workdir  # noqa: E402

BASE = "sy"


def all_available(ha, lights):
    states = ha.states()
    return all(states.get(f"light.l{i}", {}).get("state") not in (None, "unavailable", "unknown") for i in range(lights))


def run(mode, lights, say):
    d = workdir(f"ha-scale-{mode}")
    broker = Broker(d)
    watch = Watcher(broker.port, ["homeassistant/#", "$SYS/broker/publish/messages/dropped"])
    bridge = Bridge(d, broker.port, BASE, mode, lights=lights)
    ha = HomeAssistant(d, broker.port)
    figures = []
    try:
        def announced():
            return len(expected_entities(watch.snapshot(), f"switchyard_{BASE}_")) >= lights
        wait_until("the bridge's discovery configs", announced)
        time.sleep(2)
        figures.append((f"{mode}: discovery messages announcing {lights} lights", watch.discovery_messages, "msgs"))
        for phase in ("fresh start", "restart"):
            if phase == "restart":
                ha.stop()
            watch.reset_count()
            dropped = float(watch.snapshot().get("$SYS/broker/publish/messages/dropped", b"0"))
            start = time.monotonic()
            ha.start()
            wait_until(f"{lights} lights available", lambda: all_available(ha, lights), every=1)
            seconds = time.monotonic() - start
            cpu = ha.cpu_seconds()
            time.sleep(11)   # the broker's $SYS counters are updated every 10 s
            lost = float(watch.snapshot().get("$SYS/broker/publish/messages/dropped", b"0")) - dropped
            say(f"ha-scale {mode} {phase}: {seconds:.1f} s, HA CPU {cpu:.1f} s, {watch.discovery_messages} discovery msgs, {lost:.0f} dropped")
            figures += [
                (f"{mode}, HA {phase}: HA start → {lights} lights available", seconds, "s"),
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
    p.add_argument("--lights", type=int, default=1000)
    p.add_argument("--modes", default="entity,device")
    a = p.parse_args()
    out = []
    for mode in a.modes.split(","):
        out += run(mode, a.lights, lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps([{"name": n, "value": v, "unit": u} for n, v, u in out]))


if __name__ == "__main__":
    main()
