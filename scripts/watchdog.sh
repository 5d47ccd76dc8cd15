#!/usr/bin/env bash
# Runs a test command with its output line-buffered, so that a log shows every line the moment it is
# written. If the command is still running after LIMIT seconds, prints which tests started and never
# ended and the stacks of every test process under it (gdb), then stops it and exits 124: a hung run
# ends with its reason in the log instead of running into CI's time limit with its last lines unflushed.
# Usage: scripts/watchdog.sh LIMIT command [args...]
set -u
limit=$1
shift
log=$(mktemp /tmp/watchdog.XXXXXX)
pid=
# Everything the command starts is in the session it runs in (swift test gives the test binary a process
# group of its own, but not a session). The terminal's Ctrl-C does not reach that session: passed on.
stop_all() {
  pkill "-$1" -s "$pid" 2>/dev/null
  for _ in 1 2 3 4 5; do pgrep -s "$pid" > /dev/null || return; sleep 1; done
  pkill -KILL -s "$pid" 2>/dev/null
}
on_signal() {
  [ -n "$pid" ] && stop_all INT
  rm -f "$log"
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
# The command and its tee in a session of their own; tee ignores the INT passed on, so that it writes
# what the command prints on its way out. The status is the command's (pipefail).
setsid bash -c 'set -o pipefail; stdbuf -oL -eL "${@:2}" 2>&1 | tee -i "$1"' watchdog "$log" "$@" &
pid=$!
for ((t = 0; t < limit; t++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid"
  rc=$?
  rm -f "$log"
  exit $rc
fi
echo "watchdog: '$*' still running after $limit s"
echo "watchdog: tests started and not ended:"
python3 - "$log" <<'EOF'
import re, sys
started, ended = [], set()
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"Test (\w+\([^)]*\)) started", line)
    if m and "Test case" not in line:
        started.append(m.group(1))
    m = re.search(r"Test (\w+\([^)]*\)) (with \d+ test cases )?(passed|failed)", line)
    if m:
        ended.add(m.group(1))
for name in started:
    if name not in ended:
        print("  " + name)
EOF
for p in $(pgrep -s "$pid" -f '\.xctest'); do
  echo "watchdog: stacks of $p ($(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-200))"
  gdb -p "$p" -batch -ex 'thread apply all bt 30' 2>/dev/null | grep -v '^\[New \|^During symbol\|^warning:'
done
echo "watchdog: processes:"
ps -o pid,ppid,pgid,stat,etime,args -s "$pid" | cut -c1-200
stop_all TERM
rm -f "$log"
exit 124
