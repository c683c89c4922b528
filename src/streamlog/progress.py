"""A progress line on stderr for long commands (verify, bulk produce/consume).

On a terminal it redraws one line in place; when stderr is not a terminal it
prints at most one line per `every_s` seconds, so logs stay readable.
"""
import sys
import time


class Progress:
    def __init__(self, label, total, unit="B", stream=None, every_s=1.0, enabled=True):
        self.label = label
        self.total = max(total, 0)
        self.unit = unit
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last = 0.0
        self._start = time.monotonic()
        self._drawn = False

    def _fmt(self, n):
        if self.unit != "B":
            return f"{n:,} {self.unit}"
        for unit in ("B", "KiB", "MiB", "GiB"):
            if n < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            n /= 1024

    def update(self, done, detail=""):
        if not self.enabled:
            return
        now = time.monotonic()
        interval = 0.1 if self.tty else self.every_s
        if now - self._last < interval and done < self.total:
            return
        self._last = now
        if self.total:
            frac = done / self.total
            bar = "#" * int(frac * 30)
            line = (f"{self.label} [{bar:<30}] {frac * 100:5.1f}% {self._fmt(done)}/"
                    f"{self._fmt(self.total)} {detail}")
        else:   # no total known (a stream): a count and its rate, not a bar stuck at 100%
            rate = done / max(now - self._start, 1e-9)
            line = f"{self.label} {self._fmt(done)} ({self._fmt(int(rate))}/s) {detail}"
        if self.tty:
            self.stream.write("\r" + line[:200].ljust(100))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._drawn = True

    def finish(self):
        if self.enabled and self._drawn and self.tty:
            self.stream.write("\n")
            self.stream.flush()
