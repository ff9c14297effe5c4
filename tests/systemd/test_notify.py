#!/usr/bin/python3
"""collcd under systemd-socket-activate: READY, STATUS, WATCHDOG, RELOADING and
STOPPING notifications, and the watchdog pings stop while the scheduler is
stalled (SIGUSR2 freezes it) and resume after.

usage: test_notify.py COLLCD COLLCTL
"""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

collcd, collcctl = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="collc-notify.")
notify_path = os.path.join(tmp, "notify")
sock_path = os.path.join(tmp, "collcd.sock")
conf_path = os.path.join(tmp, "collcd.conf")
with open(conf_path, "w") as f:
    f.write("channels = 1\n")

ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ns.bind(notify_path)

proc = subprocess.Popen(
    ["systemd-socket-activate", "--seqpacket", "-l", sock_path,
     "-E", "NOTIFY_SOCKET=" + notify_path, "-E", "WATCHDOG_USEC=1000000",
     collcd, "--foreground", "--backend", "cpu", "--config", conf_path],
    stderr=open(os.path.join(tmp, "collcd.log"), "w"))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def messages(seconds):
    """Every notification received within `seconds`."""
    out = []
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return out
        r, _, _ = select.select([ns], [], [], left)
        if r:
            out.extend(ns.recv(4096).decode().split("\n"))


def ctl(*args):
    return subprocess.run([collcctl, "--socket", sock_path] + list(args),
                          capture_output=True, text=True, timeout=20)


try:
    for _ in range(100):
        if os.path.exists(sock_path):
            break
        time.sleep(0.05)
    # systemd-socket-activate starts collcd on the first connection.
    status = ctl("status")
    check(status.returncode == 0 and "collcd:" in status.stdout, "status through the activated socket")
    first = messages(2.5)
    check("READY=1" in first, "READY=1 sent")
    check(any(m.startswith("STATUS=") for m in first), "STATUS= lines sent")
    check("WATCHDOG=1" in first, "WATCHDOG=1 sent while the scheduler runs")
    check(ctl("get", "channels").stdout.strip() == "1", "--config applied (channels = 1)")

    # The daemon's own pid: systemd-socket-activate exec'd into it.
    pid = proc.pid
    os.kill(pid, signal.SIGUSR2)
    messages(1.2)  # a ping already due may still arrive
    stalled = messages(2.5)
    check("WATCHDOG=1" not in stalled, "no WATCHDOG=1 while the scheduler is stalled")
    os.kill(pid, signal.SIGUSR2)
    resumed = messages(2.5)
    check("WATCHDOG=1" in resumed, "WATCHDOG=1 again once the scheduler resumed")

    with open(conf_path, "w") as f:
        f.write("channels = 2\n")
    os.kill(pid, signal.SIGHUP)
    reload_msgs = messages(1.5)
    check("RELOADING=1" in reload_msgs and "READY=1" in reload_msgs, "SIGHUP: RELOADING=1 then READY=1")
    check(ctl("get", "channels").stdout.strip() == "2", "SIGHUP re-read --config (channels = 2)")

    # A single activated socket serves admin verbs only to root or collcd's own user.
    if os.geteuid() == 0 and subprocess.run(["which", "setpriv"], capture_output=True).returncode == 0:
        os.chmod(tmp, 0o755)
        os.chmod(sock_path, 0o777)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            collcctl, "--socket", sock_path, "set", "channels=1"],
                           capture_output=True, text=True, timeout=20)
        check(r.returncode != 0 and "permission denied" in r.stderr, "an unprivileged user cannot set")
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            collcctl, "--socket", sock_path, "status", "--json"],
                           capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "an unprivileged user can read status")
    else:
        print("note: not root or no setpriv: unprivileged set not checked here")

    os.kill(pid, signal.SIGTERM)
    proc.wait(timeout=10)
    check("STOPPING=1" in messages(0.5), "SIGTERM: STOPPING=1")
    check(proc.returncode == 0, "collcd exited 0 on SIGTERM")
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()

if failures:
    print(open(os.path.join(tmp, "collcd.log")).read())
    print("%d passed, %d failed" % (0, len(failures)))
    sys.exit(1)
print("systemd notify: all checks passed")
