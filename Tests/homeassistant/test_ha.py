"""The real-Home-Assistant tier (`make test-ha`, docs/testing.md "Home Assistant"): Home Assistant Core 2025.4.4
reads what the bridge announces, per device and per entity, migrates an install from one to the other, has
every entity of a thousand lights available after a fresh start and after a restart, and drives the demo's
group and scene."""

import datetime
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Bridge, Broker, HomeAssistant, Watcher, cleanup, expected_entities, main_entities,  # noqa: E402
                     wait_until, workdir)

BASE = "sy"
NODE = f"switchyard_{BASE}_"
# What Home Assistant's log says about this bridge's configs and topics.
NEEDLES = [NODE, f"'{BASE}/", f" {BASE}/", "Switchyard"]


class Setup:
    def __init__(self, name):
        self.dir = workdir(name)
        self.broker = Broker(self.dir)
        self.watch = Watcher(self.broker.port, ["homeassistant/#", f"{BASE}/#"])
        self.bridge = None
        self.ha = HomeAssistant(self.dir, self.broker.port)

    def close(self):
        self.ha.stop()
        if self.bridge:
            self.bridge.stop()
        self.watch.stop()
        self.broker.stop()
        cleanup(self.dir)

    def announced(self):
        """The entities of the retained configs once they have stopped changing for two seconds."""
        last = {"n": -1, "since": time.monotonic()}

        def settled():
            n = len(expected_entities(self.watch.snapshot(), NODE))
            if n != last["n"]:
                last.update(n=n, since=time.monotonic())
            return n > 0 and time.monotonic() - last["since"] > 2 and n
        wait_until("the bridge's discovery configs", settled)
        return expected_entities(self.watch.snapshot(), NODE)

    def ours(self):
        """This bridge's entities in Home Assistant's entity registry: unique_id → entity_id."""
        return {e["unique_id"]: e["entity_id"] for e in self.ha.entity_registry()
                if e["platform"] == "mqtt" and (e.get("unique_id") or "").startswith(NODE)}

    def wait_available(self, expected):
        """Every announced entity registered, and available unless its device's availability says offline."""
        def ready():
            registry = self.ours()
            if set(registry) != set(expected):
                return False
            states, snap = self.ha.states(), self.watch.snapshot()
            for uid, (_, avail) in expected.items():
                online = avail is None or snap.get(avail) == b"online"
                state = states.get(registry[uid])
                if state is None or (online and state["state"] == "unavailable"):
                    return False
            return registry
        return wait_until("every entity registered and available", ready)

    def problems(self):
        return self.ha.log_problems(NEEDLES)


class DemoDiscoveryTests(unittest.TestCase):
    """The demo's devices (every adapter against its simulator) in a fresh Home Assistant."""

    def check(self, mode):
        s = Setup(f"demo-{mode}")
        try:
            s.bridge = Bridge(s.dir, s.broker.port, BASE, mode)
            expected = s.announced()
            self.assertGreater(len(expected), 60)
            snap = s.watch.snapshot()
            ours = [t for t, p in snap.items() if p and t.split("/")[2:3] and t.split("/")[2].startswith(NODE)]
            if mode == "device":
                self.assertTrue(all(t.startswith("homeassistant/device/") for t in ours), ours)
            else:
                self.assertFalse(any(t.startswith("homeassistant/device/") for t in ours), ours)
            s.ha.start()
            registry = s.wait_available(expected)
            self.assertEqual(len(registry), len(expected))
            self.assertEqual(s.problems(), [])
        finally:
            s.close()

    def test_device_mode(self):
        self.check("device")

    def test_entity_mode(self):
        self.check("entity")


class MigrationTests(unittest.TestCase):
    def test_a_per_entity_install_moves_to_device_configs_keeping_its_entities(self):
        s = Setup("migration")
        try:
            s.bridge = Bridge(s.dir, s.broker.port, BASE, "entity", log_name="entity.log")
            expected = s.announced()
            s.ha.start()
            before = s.wait_available(expected)
            light = next(e for u, e in before.items() if e.startswith("light.") and expected[u][1]
                         and s.watch.snapshot().get(expected[u][1]) == b"online")
            since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)).isoformat()
            wait_until("the light's state in the recorder", lambda: s.ha.history(light, since))
            time.sleep(2)   # the recorder commits every second
            migrated_at = datetime.datetime.now(datetime.UTC)

            self.assertEqual(s.bridge.stop(), 0)
            s.bridge = Bridge(s.dir, s.broker.port, BASE, "device", log_name="device.log")

            def cleared():
                snap = s.watch.snapshot()
                old = [t for t, p in snap.items() if p and len(t.split("/")) == 5 and t.split("/")[2].startswith(NODE)]
                new = [t for t, p in snap.items() if p and t.startswith("homeassistant/device/") and t.split("/")[2].startswith(NODE)]
                return not old and new
            wait_until("the per-entity configs cleared and the device configs announced", cleared)
            after_expected = s.announced()
            self.assertEqual(set(after_expected), set(expected))
            after = s.wait_available(after_expected)
            # The same entities: same unique_ids under the same entity ids, and none left over.
            self.assertEqual(after, before)
            states = s.ha.states()
            for entity_id in after.values():
                self.assertFalse(states[entity_id]["attributes"].get("restored", False), entity_id)
            # Its history from before the migration is still the entity's.
            history = s.ha.history(light, since)
            first = datetime.datetime.fromisoformat(history[0]["last_changed"])
            self.assertLess(first, migrated_at, history[:3])
            self.assertEqual(s.problems(), [])
        finally:
            s.close()


class RenameTests(unittest.TestCase):
    """Issue 36: a device renamed over MQTT (`device/rename`) is the same entity in Home Assistant (same
    unique_id, same entity id) under its new name, its old topics empty; with `homeassistant_rename` its
    entity id follows the new name, still the same unique_id."""

    def rename(self, s, device, to, anew=False):
        tx = f"rename-{device}"
        s.watch.publish(f"{BASE}/bridge/request/device/rename",
                        json.dumps({"adapter": "virtual", "device": device, "to": to, "homeassistant_rename": anew, "transaction": tx}))

        def answered():
            r = s.watch.snapshot().get(f"{BASE}/bridge/response/device/rename")
            return r and json.loads(r).get("transaction") == tx and json.loads(r)
        answer = wait_until(f"the answer to renaming {device}", answered)
        self.assertEqual(answer["status"], "ok", answer)

    def test_a_renamed_device_keeps_its_entity(self):
        s = Setup("rename")
        try:
            s.bridge = Bridge(s.dir, s.broker.port, BASE, "device", lights=3)
            expected = s.announced()
            s.ha.start()
            before = s.wait_available(expected)
            kept, anew = f"{NODE}virtual_l0_light", f"{NODE}virtual_l1_light"
            self.assertEqual(s.ha.states()[before[kept]]["attributes"]["friendly_name"], "L0")

            self.rename(s, "l0", "desk_lamp")
            self.rename(s, "l1", "reading_lamp", anew=True)

            def renamed():
                registry, states = s.ours(), s.ha.states()
                if registry.get(kept) != before[kept] or registry.get(anew) != "light.reading_lamp":
                    return False
                one, two = states.get(registry[kept]), states.get(registry[anew])
                return (one and two and one["attributes"].get("friendly_name") == "Desk lamp"
                        and two["attributes"].get("friendly_name") == "Reading lamp"
                        and one["state"] != "unavailable" and two["state"] != "unavailable")
            wait_until("the same entities under their new names", renamed)
            # Nothing else: the same unique_ids, no entity left over or added.
            self.assertEqual(set(s.ours()), set(before))
            snap = s.watch.snapshot()
            for old in ["l0", "l1"]:
                for topic in [f"{BASE}/virtual/{old}", f"{BASE}/virtual/{old}/availability", f"{BASE}/bridge/devices/virtual/{old}"]:
                    self.assertFalse(snap.get(topic), f"{topic} is not empty")
            self.assertEqual(s.problems(), [])
        finally:
            s.close()


class GroupSceneTests(unittest.TestCase):
    """Issue 37: the demo's group `downstairs` and scene `movie` (Sources/SwitchyardDemo/SimulatedHome.swift) in
    a fresh Home Assistant: the group is a light, and `light.turn_on` on it reaches every device it holds, on every
    upstream; the scene is a scene entity, and `scene.turn_on` sets what the scene stores. The group's `entity_id`
    attribute is to name its members' entities as Home Assistant registered them: known to fail (below)."""

    # As the demo's config says: downstairs' direct members, and every device it reaches (porch's included).
    DIRECT = ["virtual/kitchen", "virtual/fan", "lifx/kitchen", "lifx/lounge_left", "lifx/lounge_right", "lifx/desk",
              "imp/hall_clock", "group/porch"]
    DEVICES = DIRECT[:-1] + ["lifx/porch", "virtual/hall/lamp"]
    # The devices that have a brightness (the fan is a switch).
    DIMMABLE = ["virtual/kitchen", "lifx/kitchen", "lifx/lounge_left", "lifx/lounge_right", "lifx/desk", "imp/hall_clock",
                "lifx/porch", "virtual/hall/lamp"]

    def state(self, s, member):
        payload = s.watch.snapshot().get(f"{BASE}/{member}")
        return json.loads(payload) if payload else {}

    def wait_members(self, s, what, condition):
        """Waits until `condition` holds of every device's state (by member); fails naming them as they are."""
        try:
            wait_until(what, lambda: condition({m: self.state(s, m) for m in self.DEVICES}), timeout=60)
        except AssertionError as e:
            self.fail(f"{e}: {json.dumps({m: self.state(s, m) for m in self.DEVICES}, indent=1)}")

    @staticmethod
    def on(state):
        """ON by its `state`, or by its one ON/OFF field where it has no `state` (the Imp clock's `power`)."""
        return state.get("state", state.get("power")) in ("ON", True)

    def start(self, s):
        """The demo per device and a fresh Home Assistant with every entity available: its registry (unique_id →
        entity id) and the main entities' unique ids by topic."""
        s.bridge = Bridge(s.dir, s.broker.port, BASE, "device")
        expected = s.announced()
        s.ha.start()
        registry = s.wait_available(expected)
        mains = main_entities(s.watch.snapshot(), NODE)
        self.assertEqual(expected[mains[f"{BASE}/group/downstairs"]][0], "light")
        self.assertEqual(expected[mains[f"{BASE}/scene/movie"]][0], "scene")
        return registry, mains

    def test_the_group_and_the_scene_work_from_home_assistant(self):
        s = Setup("groups")
        try:
            registry, mains = self.start(s)
            group = registry[mains[f"{BASE}/group/downstairs"]]
            scene = registry[mains[f"{BASE}/scene/movie"]]
            self.assertTrue(group.startswith("light."), group)
            self.assertTrue(scene.startswith("scene."), scene)
            for m in self.DEVICES:
                wait_until(f"{m} online", lambda m=m: s.watch.snapshot().get(f"{BASE}/{m}/availability") == b"online")

            # Every device off first (each on its own topic), so that the group's command has something to change.
            for m in self.DEVICES:
                s.watch.publish(f"{BASE}/{m}/set", "OFF" if not m.startswith("imp/") else json.dumps({"power": "OFF"}))
            self.wait_members(s, "every member off", lambda states: not any(self.on(v) for v in states.values()))
            wait_until(f"{group} off", lambda: s.ha.states()[group]["state"] == "off")

            s.ha.call("light", "turn_on", {"entity_id": group, "brightness_pct": 40})

            self.wait_members(s, "every member on at 40 %", lambda states: (
                all(self.on(v) for v in states.values())
                and all(abs(states[m].get("brightness", -1) - 40) <= 1 for m in self.DIMMABLE)
                and states["imp/hall_clock"].get("brightness_raw") == 6))   # the clock's 15 steps
            wait_until(f"{group} on in Home Assistant", lambda: s.ha.states()[group]["state"] == "on")

            before = s.ha.states()[scene]["state"]
            s.ha.call("scene", "turn_on", {"entity_id": scene})

            def applied(states):
                left, lamp = states["lifx/lounge_left"], states["virtual/hall/lamp"]
                # group/downstairs: OFF, except the two the scene names after it.
                off = [m for m in self.DEVICES if m not in ("lifx/lounge_left", "virtual/hall/lamp")]
                return (not any(self.on(states[m]) for m in off)
                        and self.on(left) and abs(left.get("brightness", -1) - 20) <= 1
                        and abs((left.get("color") or {}).get("h", -1) - 240) <= 1
                        and self.on(lamp) and lamp.get("brightness") == 35 and lamp.get("color_temp") == 2700)
            self.wait_members(s, "the scene movie applied", applied)
            activated = json.loads(s.watch.snapshot()[f"{BASE}/scene/movie"])
            self.assertIsNotNone(activated["last_activated"])
            # Home Assistant's scene entity says when it was activated.
            wait_until(f"{scene} activated", lambda: s.ha.states()[scene]["state"] not in (before, "unavailable"))
            self.assertEqual(s.problems(), [])
        finally:
            s.close()

    @unittest.expectedFailure
    def test_the_groups_entity_id_attribute_names_its_members_entities(self):
        """Known to fail: the attribute lists the entity ids the bridge announced (`default_entity_id`), and the
        demo announces two devices as `light.kitchen` (virtual/kitchen, lifx/kitchen) and two as `light.porch`
        (group/porch, lifx/porch): Home Assistant registers the second of each as `…_2`, so the attribute names one
        member's entity twice and misses the other. Remove the decorator once the bridge's announced entity ids are
        unique among its devices."""
        s = Setup("group-members")
        try:
            registry, mains = self.start(s)
            group = registry[mains[f"{BASE}/group/downstairs"]]
            # Its direct members' entities as Home Assistant registered them (the clock has no main entity).
            members = sorted(registry[mains[f"{BASE}/{m}"]] for m in self.DIRECT if f"{BASE}/{m}" in mains)
            self.assertEqual(len(members), len(self.DIRECT) - 1, mains)
            self.assertEqual(sorted(s.ha.states()[group]["attributes"].get("entity_id", [])), members)
        finally:
            s.close()


class ThousandLightsTests(unittest.TestCase):
    """Issue 39: every one of a thousand lights available after a fresh start and after a restart."""

    def check(self, mode, lights=1000):
        s = Setup(f"lights-{mode}")
        try:
            s.bridge = Bridge(s.dir, s.broker.port, BASE, mode, lights=lights)
            expected = s.announced()
            self.assertEqual(sum(1 for c, _ in expected.values() if c == "light"), lights)
            s.ha.start()
            s.wait_available(expected)
            s.ha.stop()
            s.ha.start()
            s.wait_available(expected)
            self.assertEqual(s.problems(), [])
        finally:
            s.close()

    def test_device_mode(self):
        self.check("device")

    def test_entity_mode(self):
        self.check("entity")


if __name__ == "__main__":
    unittest.main(verbosity=2)
