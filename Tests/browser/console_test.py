#!/usr/bin/env python3
"""The operator console in a real browser: Debian's chromium driven by chromedriver through selenium, against
the demo (`switchyard-sim demo`) on a real Mosquitto. What a MQTT client sees is read with mosquitto_sub and
changed with mosquitto_pub. /metrics is parsed by prometheus_client, a real Prometheus text parser, and
checked by promtool (Debian's prometheus). --url may carry a path prefix (a reverse proxy's): every
request the page makes must stay under it.

Run by Tests/SwitchyardWebTests/BrowserTests.swift (which starts the broker and the demo); by hand:
  .build/web-venv/bin/python Tests/browser/console_test.py --url http://127.0.0.1:9180 --mqtt-port 1883 --base switchyard
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

ARGS = None
FAILURES = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        FAILURES.append(what)
    return condition


def wait(predicate, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # the page is still drawing
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out: {what() if callable(what) else what} (last: {last!r})")


def steady(read, tries=5):
    """`read()`, again if a card it held was replaced meanwhile (its device's details changed)."""
    for attempt in range(tries):
        try:
            return read()
        except StaleElementReferenceException:
            if attempt == tries - 1:
                raise
            time.sleep(0.2)


def retained(topic):
    """The retained payload a MQTT client reads now."""
    out = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(ARGS.mqtt_port), "-t", topic, "-C", "1", "-W", "5"],
                         capture_output=True, text=True, timeout=20)
    return out.stdout.strip()


def publish(topic, payload):
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(ARGS.mqtt_port), "-t", topic, "-m", payload], check=True, timeout=20)


def state(rel):
    text = retained(f"{ARGS.base}/{rel}")
    return json.loads(text) if text else {}


def by_name(driver, name):
    """The one element on show whose accessible name (aria-label) is `name`."""
    found = [e for e in driver.find_elements(By.CSS_SELECTOR, f'[aria-label="{name}"]') if e.is_displayed()]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} elements named {name!r}")
    return found[0]


def shot(driver, name):
    if ARGS.screenshots:
        os.makedirs(ARGS.screenshots, exist_ok=True)
        driver.save_screenshot(os.path.join(ARGS.screenshots, name))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--mqtt-port", type=int, required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--demo-config", help="the demo's config file: a reload test edits it")
    p.add_argument("--docs", help="docs/console.md: every /metrics family must be described there")
    p.add_argument("--screenshots", help="a directory for PNGs of each view")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ARGS = p.parse_args()

    options = webdriver.ChromeOptions()
    options.binary_location = ARGS.chromium
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1360,900",
              "--force-device-scale-factor=1"]:
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(ARGS.chromedriver), options=options)
    driver.set_page_load_timeout(30)
    try:
        run(driver)
    finally:
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        check(not severe, f"the browser console has no error {severe if severe else ''}")
        driver.quit()
    metrics()
    print(f"{len(FAILURES)} failed" if FAILURES else "all checks passed", flush=True)
    return 1 if FAILURES else 0


def run(driver):
    base = ARGS.base
    driver.get(ARGS.url + "/")
    # Under a proxy's prefix: the page's assets came from under it, and its WebSocket connected there.
    # "connected" until the bridge's first status, then its readiness: either says the WebSocket is up.
    wait(lambda: re.match(r"(connected|ready|not ready)", driver.find_element(By.ID, "link").text), "the page's WebSocket connected", timeout=30)
    assets = [a for a in driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
              if not a.startswith("data:")]
    check(assets and all(a.startswith(ARGS.url + "/") for a in assets), f"every asset under {ARGS.url}/: {assets}")
    # Every device the bridge lists, grouped by adapter. The listing is read again until the page shows the
    # same set: lights found on the LAN may still be joining it while the page opens.
    devices = []

    def listed():
        nonlocal devices
        devices = json.loads(retained(f"{base}/bridge/devices"))
        want = {(d["adapter"], f'{d["adapter"]}/{d["name"]}') for d in devices}
        # One script, so that the set is read from one drawing of the page.
        shown = {tuple(c) for c in driver.execute_script(
            "return [...document.querySelectorAll('article.card')]"
            ".map((c) => [c.closest('section[data-adapter]').dataset.adapter, c.dataset.key])")}
        return shown == want and driver.find_element(By.ID, "device-count").text == f"{len(devices)} of {len(devices)} devices"

    check(wait(listed, "the page lists every device of bridge/devices, each under its adapter", timeout=30),
          "every listed device has its card, under its adapter")

    # Every control has an accessible name that starts with its device's (spoken) name and names the field.
    def names():
        unnamed = []
        for card in driver.find_elements(By.CSS_SELECTOR, "article.card"):
            device = card.get_attribute("aria-label")
            for control in card.find_elements(By.CSS_SELECTOR, "input, select, button, textarea"):
                name = control.accessible_name
                if not name.startswith(device + " ") or len(name) <= len(device) + 1:
                    unnamed.append((device, name))
        return unnamed
    unnamed = steady(names)
    check(not unnamed, f"every control's accessible name is '<device> <field>' {unnamed[:5]}")
    shot(driver, "console-devices.png")

    # Switching a light from the page changes the retained state a MQTT client reads.
    before = state("virtual/kitchen").get("state")
    by_name(driver, "virtual kitchen power").click()
    want = "OFF" if before == "ON" else "ON"
    wait(lambda: state("virtual/kitchen").get("state") == want, f"virtual/kitchen is {want} on the broker")
    check(True, "the page's power switch changed the light's retained state")
    box = by_name(driver, "virtual kitchen brightness value")
    box.clear()
    box.send_keys("40", Keys.TAB)
    wait(lambda: state("virtual/kitchen").get("brightness") == 40, "brightness 40 on the broker")
    check(True, "the page's brightness changed the retained state")

    # A change published over MQTT appears in the open page, without a reload.
    publish(f"{base}/virtual/kitchen/set", '{"brightness": 75}')
    wait(lambda: by_name(driver, "virtual kitchen brightness value").get_attribute("value") == "75", "the page shows 75")
    check(True, "a change made over MQTT appeared in the page")

    # A refused value shows the bridge's error where it was given.
    box = by_name(driver, "virtual kitchen brightness value")
    box.clear()
    box.send_keys("150", Keys.TAB)
    control = box.find_element(By.XPATH, "ancestor::div[@class='control'][1]")
    error = wait(lambda: control.find_element(By.CSS_SELECTOR, "[role=alert]").text, "the refusal shown next to the control")
    check("150 is out of range 0–100" in error, f"the refusal is the bridge's own words: {error!r}")
    check(state("virtual/kitchen").get("brightness") == 75, "a refused value changed nothing")

    # A reload sends the listing again. A card whose device did not change stays the same element in the same
    # place, so the control in use keeps its focus, what was typed in it and the refusal under it, also when
    # a card before it (fan) and a whole adapter before it (imp) go. (The button is clicked from a script:
    # a click would take the focus.)
    if ARGS.demo_config:
        with open(ARGS.demo_config, encoding="utf-8") as f:
            text = f.read()
        edited = re.sub(r"(?m)^imp:\n(?:  .*\n)*", "", re.sub(r"(?m)^ *- \{name: fan,.*\n", "", text))
        check("name: fan" in text and "name: fan" not in edited and "\nimp:" in text and "\nimp:" not in edited,
              "the demo's config loses the fan and the imp section")
        with open(ARGS.demo_config, "w", encoding="utf-8") as f:
            f.write(edited)
    box.click()
    driver.execute_script("document.querySelector('[data-request=\"config/reload\"]').click()")
    wait(lambda: "config/reload: ok" in driver.find_element(By.ID, "request-result").get_attribute("textContent"), "the reload answered")
    publish(f"{base}/virtual/kitchen/set", '{"brightness": 60}')
    wait(lambda: by_name(driver, "virtual kitchen brightness").get_attribute("value") == "60", "the slider shows 60, sent after the reload")
    if ARGS.demo_config:
        wait(listed, "the page lists the reloaded config's devices")
        check(not any(d["adapter"] == "imp" or d["name"] == "fan" for d in devices), "the fan and the imp devices are gone")
    try:
        kept = (driver.switch_to.active_element == box and box.get_attribute("value") == "150"
                and "150 is out of range" in control.find_element(By.CSS_SELECTOR, "[role=alert]").text)
    except StaleElementReferenceException:   # the card was drawn anew
        kept = False
    check(kept, "a reload kept the control in use: its focus, its typed value and its error")
    if ARGS.demo_config:   # the whole demo again, for what follows (and its screenshots)
        with open(ARGS.demo_config, "w", encoding="utf-8") as f:
            f.write(text)
        publish(f"{base}/bridge/request/config/reload", "{}")
        wait(lambda: listed() and any(d["adapter"] == "imp" for d in devices), "the imp devices are back", timeout=30)

    # Filters: by name, adapter and availability.
    driver.find_element(By.ID, "filter-name").send_keys("hall/lamp")
    wait(lambda: driver.find_element(By.ID, "device-count").text.startswith("1 of"), "one device named hall/lamp")
    driver.find_element(By.ID, "filter-name").clear()
    driver.find_element(By.ID, "filter-name").send_keys(Keys.BACKSPACE)
    offline = [d for d in devices if retained(f'{d["topic"]}/availability') == "offline"]
    driver.find_element(By.CSS_SELECTOR, "#filter-availability option[value=offline]").click()
    wait(lambda: driver.find_element(By.ID, "device-count").text.startswith(f"{len(offline)} of"), f"{len(offline)} offline devices")
    check(True, "the name and availability filters")
    driver.find_element(By.CSS_SELECTOR, "#filter-availability option[value='']").click()

    groups(driver)

    # A device page: capabilities, topics with ready-to-copy lines, Home Assistant discovery entities.
    driver.get(ARGS.url + "/#/device/lifx/shelf_strip")
    detail = wait(lambda: driver.find_element(By.ID, "device-detail").text, "the device page")
    check(f"mosquitto_pub" in detail and f"{base}/lifx/shelf_strip/set" in detail, "the device page has mosquitto_pub lines")
    wait(lambda: "light" in driver.find_element(By.ID, "discovery").text and "unique" in driver.find_element(By.ID, "discovery").text.lower(),
         "its discovery entities")
    check(by_name(driver, "shelf_strip zones") is not None, "the strip's zones control")
    shot(driver, "console-device.png")

    # The bridge: version, adapters, health, the redacted config; a request answered.
    driver.get(ARGS.url + "/#/bridge")
    wait(lambda: "running" in driver.find_element(By.ID, "adapter-table").text, "adapter statuses")
    config = driver.find_element(By.ID, "config").text
    check('"token": "***"' in config and "demo-token" not in config, "the effective config, secrets as ***")
    # The level in force (the demo runs with --log-level warning), as bridge/info says it.
    level = json.loads(retained(f"{base}/bridge/info")).get("log_level")
    facts = driver.execute_script("""return [...document.querySelectorAll('#bridge-facts dt')]
        .map(dt => [dt.textContent, dt.nextElementSibling?.textContent]);""")
    check(level == "warning" and ["Log level", level] in facts, f"the log level in force: {level!r} in {facts!r}")
    driver.find_element(By.CSS_SELECTOR, "[data-request=republish]").click()
    wait(lambda: "republish: ok" in driver.find_element(By.ID, "request-result").text, "republish answered")
    check(True, "a bridge request from the page is answered")
    wait(lambda: "mqtt published" in driver.find_element(By.ID, "health").text, "live health")
    health = driver.find_element(By.ID, "health").text
    check("[object Object]" not in health and "mqtt broker receive maximum" in health,
          f"every health figure is shown as a value, the broker's each on its own: {health!r}")
    shot(driver, "console-bridge.png")

    # The log: the refusal above, filterable by level.
    driver.get(ARGS.url + "/#/log")
    publish(f"{base}/virtual/kitchen/set", '{"brightness": 151}')
    wait(lambda: "151 is out of range" in driver.find_element(By.ID, "log").text, "the error in the live log")
    driver.find_element(By.CSS_SELECTOR, "#log-level option[value=error]").click()
    levels = {li.get_attribute("data-level") for li in driver.find_elements(By.CSS_SELECTOR, "#log li") if li.is_displayed()}
    check(levels <= {"error"}, f"the level filter shows errors only ({levels})")
    shot(driver, "console-log.png")

    # The Home Assistant mirror, filterable.
    driver.get(ARGS.url + "/#/ha")
    wait(lambda: "input_boolean.guest_mode" in driver.find_element(By.ID, "ha-table").text, "the mirrored entities")
    driver.find_element(By.ID, "ha-filter").send_keys("light.")
    wait(lambda: driver.find_element(By.ID, "ha-count").text.startswith("1 of"), "one light entity")
    check(True, "the Home Assistant mirror's entities, filterable")
    shot(driver, "console-ha.png")

    if ARGS.demo_config:
        management(driver)


def file_text():
    with open(ARGS.demo_config, encoding="utf-8") as f:
        return f.read()


def press(driver, element):
    """Clicks `element` once it is scrolled to the middle of the window (the page's header stays on top)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def management(driver):
    """Bridge -> Settings, a device's Options, Rename and Remove: each change shown as its diff before it is
    applied, a refused value next to its key in check-config's words, a conflict when the file changed on disk."""
    base = ARGS.base
    driver.get(ARGS.url + "/#/bridge/settings")
    level = wait(lambda: by_name(driver, "log level"), "the settings drawn from the bridge's schema", timeout=30)
    form = driver.find_element(By.ID, "settings")
    unnamed = [e.get_attribute("outerHTML")[:80] for e in form.find_elements(By.CSS_SELECTOR, "input, select, button") if not e.accessible_name]
    check(not unnamed, f"every settings control has an accessible name {unnamed[:3]}")
    legends = [e.text for e in form.find_elements(By.CSS_SELECTOR, "fieldset > legend")]
    check({"log", "mqtt", "health", "lifx"} <= set(legends), f"grouped by section: {legends}")
    about = by_name(driver, "health interval").find_element(By.XPATH, "following-sibling::span").text
    check("default 60" in about and "range 1–86400" in about and "applied at once" in about, f"description, default, range, restart: {about!r}")
    mqtt_about = by_name(driver, "mqtt keepalive").find_element(By.XPATH, "following-sibling::span").text
    check("needs a restart of the bridge" in mqtt_about, f"what a change takes: {mqtt_about!r}")
    token = by_name(driver, "lifx token")
    check(token.get_attribute("type") == "password" and token.get_attribute("value") == "" and token.get_attribute("placeholder") == "***"
          and "demo-token" not in driver.page_source, "a secret shows as *** and is never in the page")
    shot(driver, "console-settings.png")

    # A refused value: next to its key, in check-config's words; nothing written.
    before = file_text()
    box = by_name(driver, "health interval")
    was = box.get_attribute("value")
    box.clear()
    box.send_keys("0")
    press(driver, by_name(driver, "save settings"))
    error = wait(lambda: by_name(driver, "health interval error").text, "the refusal next to health interval")
    check("health.interval: 0 is out of range 1–86400" in error and error.startswith(ARGS.demo_config + ":"),
          f"check-config's words, with the file's position: {error!r}")
    check(file_text() == before, "a refused value wrote nothing")

    # The log level: the diff first, nothing written until Apply.
    box.clear()
    box.send_keys(was)
    Select(level).select_by_value("debug")
    press(driver, by_name(driver, "save settings"))
    diff = wait(lambda: by_name(driver, "settings diff").text, "the diff before it is applied")
    cleared = driver.find_element(By.CSS_SELECTOR, '[aria-label="health interval error"]').get_attribute("textContent") == ""
    check("+" in diff and "level: debug" in diff and cleared, f"the exact diff, the earlier refusal gone: {diff!r}")
    check(file_text() == before, "nothing written before Apply")
    press(driver, by_name(driver, "settings apply"))
    wait(lambda: "Applied" in by_name(driver, "settings result").text, "applied")
    check("level: debug" in file_text(), "the level written into the demo's config")
    wait(lambda: json.loads(retained(f"{base}/bridge/info"))["config"]["log"]["level"] == "debug", "bridge/info says the new level")
    check(True, "the settings page planned, showed and applied a change")

    # A conflict: the file changes on disk between the plan and Apply.
    driver.get(ARGS.url + "/#/bridge")
    driver.get(ARGS.url + "/#/bridge/settings")
    box = wait(lambda: by_name(driver, "health interval"), "the settings again")
    box.clear()
    box.send_keys("45")
    press(driver, by_name(driver, "save settings"))
    wait(lambda: by_name(driver, "settings diff").text, "the plan")
    edited = file_text() + "# edited by hand meanwhile\n"
    with open(ARGS.demo_config, "w", encoding="utf-8") as f:
        f.write(edited)
    press(driver, by_name(driver, "settings apply"))
    error = wait(lambda: by_name(driver, "settings error").text, "the conflict shown")
    check("changed on disk since the bridge read it" in error, f"the conflict in words: {error!r}")
    check(file_text() == edited, "a conflict wrote nothing")
    publish(f"{base}/bridge/request/config/reload", "{}")
    time.sleep(1)

    # A device's options: the kitchen's state stops being retained.
    driver.get(ARGS.url + "/#/device/virtual/kitchen")
    retain = wait(lambda: by_name(driver, "kitchen retain"), "the kitchen's options", timeout=30)
    check(retain.is_selected() and by_name(driver, "kitchen debounce") is not None, "the options form, by name")
    press(driver, retain)
    press(driver, by_name(driver, "kitchen options save"))
    diff = wait(lambda: by_name(driver, "kitchen options diff").text, "the options' diff")
    check("retain: false" in diff, f"the diff says retain: false: {diff!r}")
    press(driver, by_name(driver, "kitchen options apply"))
    wait(lambda: "Applied" in by_name(driver, "kitchen options result").text, "the options applied")
    wait(lambda: retained(f"{base}/virtual/kitchen") == "", "kitchen's state no longer retained on the broker", timeout=30)
    check(True, "retain: false did what it says on the broker")

    # Rename: the desk becomes study_lamp; the page follows it; the old topics are empty.
    driver.get(ARGS.url + "/#/device/lifx/desk")
    box = wait(lambda: by_name(driver, "desk rename"), "the rename form", timeout=30)
    box.clear()
    box.send_keys("study_lamp")
    press(driver, by_name(driver, "desk rename save"))
    diff = wait(lambda: by_name(driver, "desk rename diff").text, "the rename's diff")
    check("name: study_lamp" in diff, f"the diff writes the name: {diff!r}")
    press(driver, by_name(driver, "desk rename apply"))
    wait(lambda: driver.find_element(By.ID, "device-title").text.startswith("study_lamp"), "the page follows the new name", timeout=30)
    wait(lambda: retained(f"{base}/lifx/study_lamp") != "" and retained(f"{base}/lifx/desk") == "", "new topic set, old one empty", timeout=30)
    check(True, "renamed from the device page")

    # Remove: the fan leaves the demo's config.
    driver.get(ARGS.url + "/#/device/virtual/fan")
    press(driver, wait(lambda: by_name(driver, "fan remove"), "the remove form", timeout=30))
    diff = wait(lambda: by_name(driver, "fan remove diff").text, "the removal's diff")
    check("name: fan" in diff and "-" in diff, f"the diff removes the fan: {diff!r}")
    press(driver, by_name(driver, "fan remove apply"))
    wait(lambda: retained(f"{base}/bridge/devices/virtual/fan") == "", "the fan is gone from the broker", timeout=30)
    check("name: fan" not in file_text(), "the fan left the config file")


def click(driver, element):
    """Clicks `element` once it is scrolled into the middle of the window (the sticky header covers the top)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()
    return element


def card_members(driver, key):
    return driver.execute_script(f"""return [...document.querySelectorAll('article.card[data-key="{key}"] .members li')]
        .map((li) => [li.dataset.member, li.dataset.availability])""")


def groups(driver):
    """Groups and scenes: listed with the devices, a group's card with its members and their availability, a group
    switched from its card, and a group and a scene made, edited, recalled and removed from the page."""
    base = ARGS.base
    # Read together (the reload above took the fan and the clock away and brought them back).
    def same():
        shown, members = card_members(driver, "group/downstairs"), state("group/downstairs").get("members", {})
        return (shown, members) if dict(shown) == members and set(members.values()) == {"online"} else None
    shown, members = wait(same, "the group's card lists its members, all online", timeout=30)
    check(len(shown) == 8 and dict(shown) == members,
          f"the group's card lists its 8 members with the availability its state says: {shown}")
    check(steady(lambda: [m for m, _ in card_members(driver, "scene/movie")]) == ["group/downstairs", "lifx/lounge_left", "virtual/hall/lamp"],
          "the scene's card lists what it sets")
    # Switched from its card: the group's members follow, on the broker.
    want = "OFF" if state("group/downstairs").get("state") == "ON" else "ON"
    click(driver, by_name(driver, "downstairs power"))
    wait(lambda: state("virtual/fan").get("state") == want and state("lifx/desk").get("state") == want, f"the group's members {want}")
    wait(lambda: state("group/downstairs").get("state") == want, f"the group {want}")
    check(True, "the group's power switch switched its members")

    # A group made from the page, its members picked from the device list.
    click(driver, driver.find_element(By.CSS_SELECTOR, "#groups-editor summary"))
    by_name(driver, "group name").send_keys("browser_group")
    by_name(driver, "find group members").send_keys("kitchen")
    click(driver, by_name(driver, "group member virtual/kitchen"))
    click(driver, by_name(driver, "group member lifx/kitchen"))
    click(driver, by_name(driver, "save group"))
    wait(lambda: set(state("group/browser_group").get("members", {})) == {"virtual/kitchen", "lifx/kitchen"},
         lambda: f"the new group ({driver.find_element(By.ID, 'group-result').text!r})")
    # The page hears the answer through the console's feed, another path than the group's state on the broker:
    # either may come first.
    check(wait(lambda: "group/add: done" in driver.find_element(By.ID, "group-result").text,
               lambda: f"the page's answer to the new group ({driver.find_element(By.ID, 'group-result').text!r})"),
          "the page says the group was made")
    if ARGS.demo_config:
        check("browser_group:" in open(ARGS.demo_config, encoding="utf-8").read(), "the group is written into the config file")
    # Edited from its card: the form shows it; one member out, another in.
    click(driver, wait(lambda: steady(lambda: by_name(driver, "browser_group edit")), "the new group's card"))
    check(by_name(driver, "group name").get_attribute("value") == "browser_group"
          and by_name(driver, "group member virtual/kitchen").is_selected(), "the form shows the group to edit")
    by_name(driver, "find group members").send_keys(Keys.CONTROL, "a", Keys.BACKSPACE)   # typed away: clear() fires no input event
    click(driver, by_name(driver, "group member lifx/kitchen"))
    click(driver, by_name(driver, "group member virtual/fan"))
    click(driver, by_name(driver, "save group"))
    wait(lambda: set(state("group/browser_group").get("members", {})) == {"virtual/kitchen", "virtual/fan"},
         lambda: f"the group edited ({driver.find_element(By.ID, 'group-result').text!r})")
    check(True, "a group edited from the page")

    # A scene stored from the page, recalled, removed.
    by_name(driver, "scene name").send_keys("browser_scene")
    by_name(driver, "find scene members").send_keys("browser")
    click(driver, by_name(driver, "scene member group/browser_group"))
    by_name(driver, "scene transition").send_keys("0")
    click(driver, by_name(driver, "store scene"))
    wait(lambda: state("scene/browser_scene").get("members") == ["group/browser_group"], "the new scene")
    shot(driver, "console-groups.png")
    click(driver, by_name(driver, "recall scene"))
    wait(lambda: "scene/recall: done" in driver.find_element(By.ID, "scene-result").text, "the recall answered")
    click(driver, by_name(driver, "remove scene"))
    wait(lambda: retained(f"{base}/scene/browser_scene") == "", "the scene removed")
    by_name(driver, "group name").clear()
    by_name(driver, "group name").send_keys("browser_group")
    click(driver, by_name(driver, "remove group"))
    wait(lambda: retained(f"{base}/group/browser_group") == "", "the group removed")
    check(True, "a scene stored, recalled and removed, and the group removed, from the page")
    driver.execute_script("window.scrollTo(0, 0)")   # the views that follow keep the scroll of this one


def metrics():
    text = urllib.request.urlopen(ARGS.url + "/metrics", timeout=10).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    check(len(families) >= 20, f"/metrics parses ({len(families)} families)")
    connected = [s.value for s in families["switchyard_mqtt_connected"].samples]
    check(connected == [1.0], "switchyard_mqtt_connected is 1")
    commands = families.get("switchyard_commands")
    check(commands is not None and commands.type == "counter" and sum(s.value for s in commands.samples if s.name.endswith("_total")) >= 2,
          "commands are counted")
    check(families["switchyard_command_duration_seconds"].type == "histogram", "the command latency histogram")
    if ARGS.docs:
        doc = open(ARGS.docs, encoding="utf-8").read()
        missing = [n for n in families if n not in doc]
        check(not missing, f"every /metrics family is described in docs/console.md {missing}")
    # Prometheus's own linter: HELP text for every family, names and types as it wants them.
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    said = (lint.stdout + lint.stderr).strip()
    check(lint.returncode == 0 and not said, f"promtool check metrics finds nothing to fix {said!r}")


if __name__ == "__main__":
    sys.exit(main())
