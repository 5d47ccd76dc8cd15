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
trap 'rm -f "$log"' EXIT
# Its own process group, so that the command and everything it started can be stopped together.
setsid stdbuf -oL -eL "$@" > >(tee "$log") 2>&1 &
pid=$!
# The command is in a session of its own, out of reach of the terminal's Ctrl-C: pass it on.
trap 'kill -TERM -- "-$pid" 2>/dev/null; exit 130' INT TERM
for ((t = 0; t < limit; t++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid"
  exit $?
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
for p in $(pgrep -g "$pid" -f '\.xctest'); do
  echo "watchdog: stacks of $p ($(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-200))"
  gdb -p "$p" -batch -ex 'thread apply all bt 30' 2>/dev/null | grep -v '^\[New \|^During symbol\|^warning:'
done
echo "watchdog: processes:"
ps -o pid,ppid,stat,etime,args -g "$pid" | cut -c1-200
kill -TERM -- "-$pid" 2>/dev/null
sleep 5
kill -KILL -- "-$pid" 2>/dev/null
exit 124
