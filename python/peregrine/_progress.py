"""The progress bar of LLM.generate: tqdm where it is installed, else a small one of our own; shown only when
stderr is a terminal (or when the caller passes its own tqdm-like class as use_tqdm)."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Union

DESCRIPTION = "Processed prompts"


class _Bar:
    """A one-line bar on stderr: 'Processed prompts:  45%|#####     | 450/1000 [00:03<00:04, 150.2 it/s]'."""

    def __init__(self, total: int, desc: str, stream: Any = None, min_interval: float = 0.1) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self._stream = stream or sys.stderr
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._min_interval = min_interval
        self._draw()

    @staticmethod
    def _clock(seconds: float) -> str:
        seconds = int(seconds)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"

    def _draw(self) -> None:
        elapsed = time.monotonic() - self._start
        frac = self.n / self.total if self.total else 1.0
        width = 20
        filled = int(frac * width)
        rate = self.n / elapsed if elapsed > 0 else 0.0
        remaining = (self.total - self.n) / rate if rate > 0 else 0.0
        self._stream.write(f"\r{self.desc}: {frac * 100:3.0f}%|{'#' * filled}{' ' * (width - filled)}| "
                           f"{self.n}/{self.total} [{self._clock(elapsed)}<{self._clock(remaining)}, {rate:.1f} it/s]")
        self._stream.flush()
        self._last_draw = time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n >= self.total or time.monotonic() - self._last_draw >= self._min_interval:
            self._draw()

    def close(self) -> None:
        self._draw()
        self._stream.write("\n")
        self._stream.flush()


def make_bar(use_tqdm: Union[bool, Callable[..., Any]], total: int) -> Optional[Any]:
    """A bar with update(k) and close(), or None when none is wanted."""
    if callable(use_tqdm):
        return use_tqdm(total=total, desc=DESCRIPTION)
    if not use_tqdm or total == 0 or not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Bar(total, DESCRIPTION)
    return tqdm(total=total, desc=DESCRIPTION, dynamic_ncols=True)


class Progress:
    """Feeds a bar from the engine's count of finished prompts."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.done = 0

    def __call__(self, num_finished: int) -> None:
        if num_finished > self.done:
            self.bar.update(num_finished - self.done)
            self.done = num_finished
