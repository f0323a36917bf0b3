"""Operation histories for `repro chaos` workloads (stdlib only).

One JSON line per event, the format repro-history reads, as Jepsen/Knossos histories:

    from history import History
    h = History()                      # $HISTORY_FILE, else history.jsonl in the working directory
    h.invoke(0, "write", 3)
    h.ok(0, "write", 3)
    h.invoke("web-1", "read", key="k1")
    h.ok("web-1", "read", 3, key="k1")
    h.invoke(2, "cas", [3, 4])
    h.info(2, "cas", [3, 4])           # timed out: it may or may not have happened

Times are time.monotonic_ns() (CLOCK_MONOTONIC, the clock history.sh reads too). Every line is one os.write to
a descriptor opened with O_APPEND, so processes appending to the same file never interleave their lines; nothing
is buffered (a crash loses no event already returned from).
"""

import json
import os
import time

__all__ = ["History"]


class History:
    """Appends events to a history file."""

    def __init__(self, path=None):
        if path is None:
            path = os.environ.get("HISTORY_FILE", "history.jsonl")
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)

    def _event(self, process, type_, f, value, key):
        if not isinstance(process, (int, str)) or isinstance(process, bool):
            raise TypeError("process must be an int or a str, not %r" % (process,))
        event = {"process": process, "type": type_, "f": f}
        if key is not None:
            event["key"] = str(key)
        event["value"] = value
        event["time"] = time.monotonic_ns()
        line = (json.dumps(event, separators=(", ", ": "), allow_nan=False) + "\n").encode("utf-8")
        written = os.write(self._fd, line)
        if written != len(line):
            raise OSError("short write to %s: %d of %d bytes" % (self.path, written, len(line)))

    def invoke(self, process, f, value=None, key=None):
        """The process starts operation f."""
        self._event(process, "invoke", f, value, key)

    def ok(self, process, f, value=None, key=None):
        """It happened (value: what it returned, e.g. the value read)."""
        self._event(process, "ok", f, value, key)

    def fail(self, process, f, value=None, key=None):
        """It certainly did not happen."""
        self._event(process, "fail", f, value, key)

    def info(self, process, f, value=None, key=None):
        """Indeterminate: it may or may not have happened (a timeout, a crash)."""
        self._event(process, "info", f, value, key)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
