"""A test that passes or fails depending on the machine it runs on.

It builds a release-notes header from the environment: the user, the host, the time zone, the locale, the
release date, and a package index it tries to reach. On a laptop it passes; in CI it fails in ways that are
hard to reproduce. Under `repro run` every one of those inputs is pinned, so it fails the same way everywhere.
"""

import datetime
import os
import socket
import sys


def header():
    when = datetime.datetime.fromtimestamp(int(os.environ.get("SOURCE_DATE_EPOCH", "0")), datetime.timezone.utc)
    return {
        "user": os.environ.get("USER", "?"),
        "host": socket.gethostname(),
        "tz": os.environ.get("TZ", "(host default)"),
        "locale": os.environ.get("LC_ALL") or os.environ.get("LANG", "(unset)"),
        "date": when.strftime("%Y-%m-%d"),
    }


def mirror_reachable():
    """Whether this machine has a route off itself (a default route), read from /proc/net/route."""
    try:
        with open("/proc/net/route") as f:
            routes = [line.split() for line in f.readlines()[1:]]
    except OSError as e:
        return f"unknown ({e.strerror})"
    if any(r[1] == "00000000" for r in routes if len(r) > 1):
        return "reachable"
    return "unreachable (no route off this machine)"


def main():
    h = header()
    for k in sorted(h):
        print(f"{k:>7}: {h[k]}")
    status = mirror_reachable()
    print(f" mirror: {status}")
    sys.stdout.flush()
    if not status.startswith("reachable"):
        print("FAILED test_release_notes: the package mirror is required to list the release's packages", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
