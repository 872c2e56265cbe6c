"""Progress of a long run on stderr: a tqdm bar on a terminal, plain lines in a log.

When stderr is not a terminal (CI logs, ``| tee``), a bar's carriage returns
are useless and a silent run looks hung, so ``Progress`` prints one line such
as ``certify: 12/112 cells, rrs zipf k=4, 35 s elapsed`` after the first
step, the last step, and whenever ``interval`` seconds have passed since the
previous line.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """Progress of ``total`` steps named ``desc`` (``unit`` per step), on ``stream`` (default stderr).

    ``mode``: ``"auto"`` (tqdm bar when the stream is a terminal, else lines),
    ``"bar"``, ``"lines"`` or ``"off"``.  ``interval``: seconds between lines
    (lines mode).  Use ``step(label)`` after each step, ``close()`` at the end.
    """

    def __init__(self, total: int, desc: str, unit: str, *, mode: str = "auto", interval: float = 10.0,
                 stream=None):
        if mode not in ("auto", "bar", "lines", "off"):
            raise ValueError(f"progress mode must be 'auto', 'bar', 'lines' or 'off', got {mode!r}")
        self.stream = sys.stderr if stream is None else stream
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "lines"
        self.mode, self.total, self.desc, self.unit, self.interval = mode, total, desc, unit, interval
        self.done = 0
        self.t0 = self._last = time.perf_counter()
        self._bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=self.stream)

    def start(self, label: str) -> None:
        """Name the step now running (shown on the bar)."""
        if self._bar is not None:
            self._bar.set_postfix_str(label)

    def step(self, label: str) -> None:
        """One step (``label``, e.g. ``"rrs zipf k=4"``) finished."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(1)
        elif self.mode == "lines":
            now = time.perf_counter()
            if self.done in (1, self.total) or now - self._last >= self.interval:
                self._last = now
                print(f"{self.desc}: {self.done}/{self.total} {self.unit}s, {label}, {now - self.t0:.0f} s elapsed",
                      file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def progress_mode(progress) -> str:
    """``progress`` argument -> mode: False/None -> "off", True -> "auto", or a mode string."""
    if progress is None or progress is False:
        return "off"
    if progress is True:
        return "auto"
    return str(progress)


class Heartbeat:
    """Say on ``stream`` (default stderr) that a long step is still running: a context manager.

    While the block runs, a daemon thread prints ``"<desc>: <step>, N s elapsed"`` once a step has run
    ``after`` seconds, then every ``interval`` seconds, so a call that would sit silent for minutes shows what it
    is doing; a call whose steps all finish within ``after`` prints nothing.  ``step(label)`` names the step now
    running.  ``enabled=False``: silent.
    """

    def __init__(self, desc: str, *, after: float = 10.0, interval: float = 10.0, stream=None,
                 enabled: bool = True):
        import threading

        self.desc, self.after, self.interval, self.enabled = desc, after, interval, enabled
        self.stream = sys.stderr if stream is None else stream
        self.label, self.t0 = "starting", time.perf_counter()
        self._step_t0 = self.t0
        self._stop = threading.Event()
        self._thread = None

    def step(self, label: str) -> None:
        """Name the step now running (its clock starts now)."""
        self.label, self._step_t0 = label, time.perf_counter()

    def _run(self) -> None:
        last = None
        while not self._stop.wait(0.25):
            now = time.perf_counter()
            if now - self._step_t0 < self.after or (last is not None and now - last < self.interval):
                continue
            last = now
            try:
                print(f"{self.desc}: {self.label}, {now - self.t0:.0f} s elapsed", file=self.stream, flush=True)
            except (OSError, ValueError):   # a closed stream: stay quiet
                return

    def __enter__(self):
        if self.enabled:
            import threading

            self._thread = threading.Thread(target=self._run, name=f"heartbeat {self.desc}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
