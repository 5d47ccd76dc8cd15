# Two commands on a fresh Debian 12 machine with Swift: `make run` and `make test`.
APT_PACKAGES := mosquitto mosquitto-clients libmosquitto-dev libcurl4-openssl-dev libbluetooth-dev libyaml-dev pkg-config
# What `make test` adds: the Nova end-to-end test boots a QEMU VM with a real kernel Bluetooth stack
# and BlueZ's btvirt virtual controllers (scripts/blevm); the browser test drives Debian's chromium; gdb prints
# the stacks of a test run that hangs (scripts/watchdog.sh); python3-jsonschema validates files against the
# config's JSON Schema (ConfigSchemaTests).
# The packaging tests (Tests/SwitchyardIntegrationTests/PackagingTests.swift): dpkg-dev and lintian for
# `make deb`, debootstrap for a clean Debian 12 root to install it into, podman (with runc) for the
# container and its health check, nginx as the reverse proxy the browser test goes through, prometheus
# for promtool, jq for the Home Assistant add-on's option mapping.
# rabbitmq-server: the failover tests over RabbitMQ's MQTT plugin (FailoverRabbitMQTests) start a private node
# of it per test (Tests/SwitchyardTestSupport/RabbitMQ.swift); the machine's own node is not used.
TEST_PACKAGES := qemu-system-x86 busybox-static bluez bluez-test-tools python3-venv chromium chromium-driver gdb python3-jsonschema \
                 dpkg-dev lintian debootstrap podman runc nginx prometheus jq curl rabbitmq-server
# The LIFX LAN tests' peer: lifx-emulator from PyPI, in a venv under .build (never committed).
LIFX_EMULATOR := .build/lifx-venv/bin/lifx-emulator
# The console's browser test (Tests/browser): selenium (driving Debian's chromium) and prometheus_client (a
# real parser of /metrics) from PyPI, in a venv under .build. selenium 4.52 and later need a newer certifi.
WEB_VENV := .build/web-venv/bin/python
# The MQTT 5 client test's paho-mqtt (Tests/mqtt5: a client as users write one), from PyPI in a venv under .build.
MQTT_VENV := .build/mqtt-venv/bin/python
# The real-Home-Assistant tier (`make test-ha`, Tests/homeassistant): Home Assistant Core 2025.4.4 from PyPI with
# the requirements of the integrations the tier loads, on Python 3.13 (pyenv's, else python3.13 on the PATH),
# installed by uv (from PyPI too) in a venv under .build. libturbojpeg0: Home Assistant's camera helper, which
# the MQTT integration imports, logs an error without it.
HA_VENV := .build/ha-venv/bin/python
HA_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13 /root/.pyenv/versions/3.13*/bin/python3.13) $(shell command -v python3.13))
HA_REQUIREMENTS := homeassistant==2025.4.4 home-assistant-frontend==20250411.0 paho-mqtt==2.1.0 SQLAlchemy==2.0.39 fnv-hash-fast==1.4.0 \
                   psutil-home-assistant==0.0.1
MQTT_HOST    ?= 127.0.0.1
MQTT_PORT    ?= 1883
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SWIFT_FLAGS  ?=

.PHONY: run test test-unit test-ha build deps broker release dependencies deb addon bench soak symbol-order fuzz sanitize sanitize-address sanitize-thread install clean

## Install the system packages that are missing (apt).
deps:
	@missing=""; for p in $(APT_PACKAGES) $(EXTRA_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	swift build $(SWIFT_FLAGS)

## Start a loopback Mosquitto on $(MQTT_PORT) unless something already answers there.
broker: deps
	@if timeout 1 bash -c '</dev/tcp/$(MQTT_HOST)/$(MQTT_PORT)' 2>/dev/null; then \
	  echo "a broker answers on $(MQTT_HOST):$(MQTT_PORT)"; \
	else \
	  mkdir -p .build && printf 'listener $(MQTT_PORT) 127.0.0.1\nallow_anonymous true\npersistence false\n' > .build/demo-mosquitto.conf; \
	  mosquitto -c .build/demo-mosquitto.conf -d && sleep 0.5 && echo "started mosquitto on 127.0.0.1:$(MQTT_PORT) (config .build/demo-mosquitto.conf)"; \
	fi

## The bridge in demo mode against built-in simulated devices.
run: build broker
	.build/debug/switchyard-sim demo --host $(MQTT_HOST) --port $(MQTT_PORT)

## Every test, against real Mosquitto brokers the tests start on free loopback ports.
## The Nova VM test runs on its own afterwards: its emulated CPUs would slow the others down.
## Each run is under scripts/watchdog.sh: output line by line, and a run still going after its limit (a few
## times what it takes on 2 cores) ends with the tests that never ended and every thread's stack.
WATCHDOG := scripts/watchdog.sh
## At most this many tests at once (swift-testing reads the bound from the environment). Unbounded, a few
## hundred tests start together on the cooperative pool's two threads, and the first minute's CPU-bound
## unit tests starve the ones that wait on time (docs/testing.md "A run that starves"). On a quiet machine
## the suite takes about a minute longer with it (the soak starts later).
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH ?= 16
## The packaging tests (PackagingTests) install what `make deb` makes: the release build comes first.
test:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(TEST_PACKAGES)"
	@$(MAKE) --no-print-directory $(LIFX_EMULATOR) $(WEB_VENV) $(MQTT_VENV)
	swift build --build-tests $(SWIFT_FLAGS)
	@$(MAKE) --no-print-directory deb
	$(WATCHDOG) 1800 swift test --skip-build $(SWIFT_FLAGS) --skip NovaVMTests
	$(WATCHDOG) 1800 swift test --skip-build $(SWIFT_FLAGS) --filter NovaVMTests

## The unit tier: every test that needs no broker, emulator or VM (docs/testing.md "Two tiers"). The suites
## that do are listed in Tests/integration-suites.txt; in this tier a test that starts a broker fails.
INTEGRATION_SUITES := $(shell sed -e 's/\#.*//' Tests/integration-suites.txt)
test-unit: deps
	swift build --build-tests $(SWIFT_FLAGS)
	SWITCHYARD_TEST_TIER=unit swift test --skip-build $(SWIFT_FLAGS) $(foreach s,$(INTEGRATION_SUITES),--skip '\.$(s)/')

## The real-Home-Assistant tier (docs/testing.md "Home Assistant"): not part of `make test` (each Home Assistant
## start takes 10-30 s here and the tier runs for 4 to 10 minutes). Skipped, with the reason, when Home Assistant
## cannot be installed.
test-ha:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="libturbojpeg0"
	@if ! $(MAKE) --no-print-directory $(HA_VENV); then \
	  echo "test-ha: skipped: Home Assistant 2025.4.4 could not be installed (needs Python 3.13 and PyPI; see above)"; exit 0; fi; \
	swift build --product switchyard $(SWIFT_FLAGS) && swift build --product switchyard-sim $(SWIFT_FLAGS) && \
	$(HA_VENV) -B Tests/homeassistant/test_ha.py $(HA_TESTS)

$(HA_VENV):
	@test -n "$(HA_PYTHON)" || { echo "no Python 3.13 (pyenv's or python3.13 on the PATH)"; exit 1; }
	rm -rf .build/ha-venv .build/uv-venv
	$(HA_PYTHON) -m venv .build/uv-venv && .build/uv-venv/bin/pip install -q "uv==0.13.9"
	.build/uv-venv/bin/uv venv -q -p $(HA_PYTHON) .build/ha-venv
	.build/uv-venv/bin/uv pip install -q -p .build/ha-venv/bin/python $(HA_REQUIREMENTS) || { rm -rf .build/ha-venv; exit 1; }

## The binary to deploy: the Swift runtime and Foundation linked in, so it needs no Swift toolchain on the
## target and maps about 5 MB less. Built apart from the debug/test build: .build/static/release/switchyard.
## Linked by the toolchain's lld with packed relative relocations (the position-independent binary's
## ~110 000 relocations take 22 KB instead of 2.7 MB, all of it read at every start) and without
## exporting every symbol to the dynamic table (nothing dlopens into it): 6 MB less resident, ASLR kept.
## The functions the bridge runs come first, together (scripts/switchyard.order.gz, from valgrind runs of
## the bench and the demo: `make symbol-order`), so that the kernel's fault-around maps less code it never runs.
## What is shipped is that binary stripped, .build/dist/switchyard, with its symbols and debug information
## beside it in .build/dist/switchyard.debug (objcopy --only-keep-debug; the binary names it in its
## .gnu_debuglink, and both carry the same build id), so that a crash report can still be symbolised:
## `gdb .build/dist/switchyard core` finds the .debug file next to the binary.
## `switchyard --version` names the commit: `make release` writes it to $(BUILDINFO)/switchyard_commit.h,
## which Sources/CBuildInfo includes when that folder is on the include path (-Xcc -I…). The folder's name
## never changes, so a new commit recompiles one C file and relinks; a plain `swift build` says "unknown".
ORDER := .build/switchyard.order
BUILDINFO := .build/static/buildinfo
DIST := .build/dist
VERSION := $(shell sed -n 's/^public let switchyardVersion = "\(.*\)"$$/\1/p' Sources/SwitchyardRuntime/BridgeRuntime.swift)
## The commit, with -dirty when tracked files differ from it; "unknown" outside a git clone.
COMMIT := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)
RELEASE_FLAGS := --static-swift-stdlib -Xswiftc -use-ld=lld \
                 -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic -Xlinker --build-id=sha1 -Xlinker -z -Xlinker now \
                 -Xlinker --symbol-ordering-file=$(CURDIR)/$(ORDER) -Xlinker --no-warn-symbol-ordering \
                 -Xcc -I$(CURDIR)/$(BUILDINFO)
release: deps
	@# The build does not see the order file as an input: a changed one removes the binary, so it is relinked.
	@mkdir -p .build && gzip -dc scripts/switchyard.order.gz > $(ORDER).new && \
	  if cmp -s $(ORDER).new $(ORDER); then rm $(ORDER).new; else mv $(ORDER).new $(ORDER); rm -f .build/static/release/switchyard; fi
	@# Rewritten only when the commit changed, so that an unchanged tree builds nothing again.
	@mkdir -p $(BUILDINFO) && printf '#define SWITCHYARD_COMMIT "%s"\n' '$(COMMIT)' > $(BUILDINFO)/switchyard_commit.h.new && \
	  if cmp -s $(BUILDINFO)/switchyard_commit.h.new $(BUILDINFO)/switchyard_commit.h; then rm $(BUILDINFO)/switchyard_commit.h.new; \
	  else mv $(BUILDINFO)/switchyard_commit.h.new $(BUILDINFO)/switchyard_commit.h; fi
	swift build -c release $(RELEASE_FLAGS) --product switchyard --scratch-path .build/static
	@$(RESOLVED) > .build/resolved.txt && grep -v '^#' deploy/dependencies.txt | diff -u --label deploy/dependencies.txt --label resolved - .build/resolved.txt \
	  || { echo "the packages resolved differ from deploy/dependencies.txt: see docs/operations.md \"Versions of what it is built with\""; exit 1; }
	@mkdir -p $(DIST)
	objcopy --only-keep-debug .build/static/release/switchyard $(DIST)/switchyard.debug
	@chmod 0644 $(DIST)/switchyard.debug
	cd $(DIST) && objcopy --strip-all --remove-section=.comment --add-gnu-debuglink=switchyard.debug $(CURDIR)/.build/static/release/switchyard switchyard
	@echo "$(DIST)/switchyard: $$(stat -c %s $(DIST)/switchyard) bytes stripped ($$(stat -c %s .build/static/release/switchyard) unstripped;" \
	  "symbols and debug information: $(DIST)/switchyard.debug, $$(stat -c %s $(DIST)/switchyard.debug) bytes); $$($(DIST)/switchyard --version)"

## The whole dependency graph as it resolves, one "package version" a line (Package.resolved is not committed).
RESOLVED := awk -F'"' '/"identity"/{id=$$4} /"version"/{print id, $$4}' Package.resolved | sort
## Rewrites deploy/dependencies.txt after a pin in Package.swift moved (docs/operations.md).
dependencies:
	swift package resolve
	@{ grep '^#' deploy/dependencies.txt; $(RESOLVED); } > deploy/dependencies.txt.new && mv deploy/dependencies.txt.new deploy/dependencies.txt
	@git diff --stat -- deploy/dependencies.txt

## The Debian package, .build/deb/switchyard_<version>_<arch>.deb, of the `make release` binary (or BIN=path),
## made by deploy/deb/build.sh with dpkg-deb (no network), checked by lintian (deploy/deb/README.md).
DEB_DIR := .build/deb
deb: deps
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="dpkg-dev lintian"
	@if [ -z "$(BIN)" ]; then $(MAKE) --no-print-directory release; fi
	deploy/deb/build.sh --binary $(or $(BIN),$(DIST)/switchyard) --version $(VERSION) --out $(DEB_DIR)
	lintian --fail-on error $(DEB_DIR)/switchyard_$(VERSION)_$$(dpkg --print-architecture).deb

## The Home Assistant add-on's folder, ready to copy into the /addons share of a Home Assistant machine:
## deploy/home-assistant-addon with the package of `make deb` beside its Dockerfile (docs/operations.md).
ADDON_DIR := .build/home-assistant-addon/switchyard
addon: deb
	rm -rf $(ADDON_DIR) && mkdir -p $(ADDON_DIR)
	cp -r deploy/home-assistant-addon/. $(ADDON_DIR)/
	cp $(DEB_DIR)/switchyard_$(VERSION)_$$(dpkg --print-architecture).deb $(ADDON_DIR)/switchyard.deb
	@echo "$(ADDON_DIR): copy it to /addons/switchyard on the Home Assistant machine"

## Rewrites scripts/switchyard.order.gz from callgrind runs of the release binary (scripts/symbol-order.sh).
symbol-order: release
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="valgrind"
	swift build -c release --product switchyard-bench
	swift build -c release $(RELEASE_FLAGS) --product switchyard-sim --scratch-path .build/static
	scripts/symbol-order.sh

## The benchmarks (docs/performance.md), run against the binary `make release` builds. BENCH_ARGS, e.g.
## BENCH_ARGS="--scenario memory --json".
bench: release
	swift build -c release --product switchyard-bench
	SWITCHYARD_BIN=.build/static/release/switchyard .build/release/switchyard-bench $(BENCH_ARGS)

## The soak run (docs/testing.md): the demo's home, served by a hot-standby pair, for SOAK_MINUTES (default 60)
## under commands, reloads, broker restarts, upstream outages, LAN departures and stops of the active
## instance; every breach of an invariant is printed with its time, and the run exits non-zero if there
## was one. `make test` runs a three-minute version.
SOAK_MINUTES ?= 60
soak: deps
	swift build --product switchyard-sim
	swift build --product switchyard-bench
	.build/debug/switchyard-bench --scenario soak --minutes $(SOAK_MINUTES)

$(LIFX_EMULATOR):
	python3 -m venv .build/lifx-venv && .build/lifx-venv/bin/pip install -q lifx-emulator==4.11.0

$(MQTT_VENV):
	python3 -m venv .build/mqtt-venv && .build/mqtt-venv/bin/pip install -q "paho-mqtt==2.1.0"

$(WEB_VENV):
	python3 -m venv .build/web-venv && .build/web-venv/bin/pip install -q "selenium==4.51.0" "prometheus_client==0.26.0"

## Installs the bridge: the binary of `make release` (or BIN=path), the systemd unit (its ExecStart pointing
## at $(PREFIX)/bin) and its system user (sysusers.d), the example config as /etc/switchyard/config.yaml
## unless one exists (and always as $(PREFIX)/share/switchyard/config.example.yaml), the credentials and
## state directories. DESTDIR is honoured; without one the user is made at once and given the config's group.
PREFIX ?= /usr/local
DESTDIR ?=
BIN ?=
UNITDIR ?= $(PREFIX)/lib/systemd/system
install:
	@if [ -z "$(BIN)" ]; then $(MAKE) --no-print-directory release; fi
	install -D -m 0755 $(or $(BIN),$(DIST)/switchyard) $(DESTDIR)$(PREFIX)/bin/switchyard
	install -D -m 0644 config.example.yaml $(DESTDIR)$(PREFIX)/share/switchyard/config.example.yaml
	@if [ -e $(DESTDIR)/etc/switchyard/config.yaml ]; then echo "keeping $(DESTDIR)/etc/switchyard/config.yaml"; \
	  else install -D -m 0640 config.example.yaml $(DESTDIR)/etc/switchyard/config.yaml; fi
	install -d -m 0700 $(DESTDIR)/etc/switchyard/credentials $(DESTDIR)/var/lib/switchyard
	mkdir -p $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/bin/switchyard|$(PREFIX)/bin/switchyard|g' deploy/switchyard.service > $(DESTDIR)$(UNITDIR)/switchyard.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/switchyard.service
	install -D -m 0644 deploy/switchyard.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/switchyard.conf
	@if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null; then \
	  systemd-sysusers $(PREFIX)/lib/sysusers.d/switchyard.conf && chgrp switchyard /etc/switchyard/config.yaml; fi

## Every fuzz target under libFuzzer + AddressSanitizer, FUZZ_SECONDS each (default 60); crashes are
## kept in .build/fuzz-crashes/ (docs/testing.md "Fuzzing"). E.g. `make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS="ha json"`.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh $(FUZZ_TARGETS)

## The test suite (without the Nova VM test) under AddressSanitizer with LeakSanitizer on (its suppressions,
## each for a leak outside this project with what shows it, in scripts/sanitizers/lsan.supp), in its own
## build directory so that the debug build stays as it is. CI runs it after `make test` (docs/testing.md).
sanitize-address:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(TEST_PACKAGES)"
	@$(MAKE) --no-print-directory $(LIFX_EMULATOR) $(WEB_VENV) $(MQTT_VENV)
	swift build --build-tests --sanitize=address --scratch-path .build/asan
	SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/sanitizers/lsan.supp \
	  $(WATCHDOG) 1800 swift test --skip-build --sanitize=address --scratch-path .build/asan --skip NovaVMTests

## The same under ThreadSanitizer, which must report nothing (the first report stops the run).
sanitize-thread:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(TEST_PACKAGES)"
	@$(MAKE) --no-print-directory $(LIFX_EMULATOR) $(WEB_VENV) $(MQTT_VENV)
	SWIFT_BACKTRACE=enable=no TSAN_OPTIONS=halt_on_error=1 swift test --sanitize=thread --scratch-path .build/tsan --skip NovaVMTests

sanitize: sanitize-address sanitize-thread

clean:
	rm -rf .build
