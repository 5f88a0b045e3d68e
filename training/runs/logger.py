"""Run logging: console lines + a progress bar, ``metrics.jsonl`` in the run dir, wandb.

wandb runs offline (files under ``<run_dir>/wandb``) unless the user is logged in (an
API key in ``WANDB_API_KEY`` or ``~/.netrc``) or set ``WANDB_MODE`` themselves; it is
never a hard dependency of training - if it cannot start, that is said and training
goes on with the other sinks.

Every ``metrics.jsonl`` record holds ``step``, ``kind`` (``train``, ``eval_before``,
``eval_warm_start``, ``eval_val``, ``eval_after``, ``warm_start``) and ``wall_time`` (when it
was written, seconds since the epoch); durations are named ``duration_s`` (a whole
evaluation or warm start) or ``time/<phase>`` (seconds of one step spent in a phase).
Accuracies are fractions in [0, 1] in the file and percent on the console.

``ConsoleLog`` copies the console of a run into ``<run_dir>/run.log``.

Records are appended whole (``tools.files.LineFile``): a disk that fills up mid-record
raises ``DiskFullError`` (naming the run directory, the bytes free there and the line's
length) and leaves no half line. A full disk only stops the copy into run.log (said once on
the console): the console itself goes on.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from eval.units import pct
from tools.errors import ConfigError
from tools.files import LineFile
from training.runs.resume_policy import drop_records_after
from training.runs.samples import RUN_DIR_FULL_HINT, SAMPLES

Say = Callable[[str], None]

CONSOLE_KEYS = (
    ("reward/total", "reward"),
    ("ex/batch", "ex"),
    ("kl/beta", "beta"),
    ("policy/entropy", "ent"),
    ("policy/clip_frac", "clip"),
    ("length/response", "len"),
    ("episode/turns", "turns"),
    ("sampling/fill_rate", "fill"),
    ("time/step", "s"),
)


WandbMode = Literal["online", "offline", "disabled", "shared"]
_WANDB_MODE_ALIASES: dict[str, WandbMode] = {
    "online": "online",
    "run": "online",
    "offline": "offline",
    "dryrun": "offline",
    "disabled": "disabled",
    "shared": "shared",
}
"""WANDB_MODE values wandb accepts, with the legacy spellings it maps itself."""


def wandb_mode() -> WandbMode:
    """``online`` only if the user is logged in or asked for it; else ``offline``."""
    asked = os.environ.get("WANDB_MODE")
    if asked:
        if asked not in _WANDB_MODE_ALIASES:
            raise ConfigError(f"WANDB_MODE={asked!r}; use one of {sorted(_WANDB_MODE_ALIASES)}")
        return _WANDB_MODE_ALIASES[asked]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path.home() / ".netrc"
    try:
        if netrc.is_file() and "api.wandb.ai" in netrc.read_text():
            return "online"
    except OSError:
        pass
    return "offline"


class RunLogger:
    """Fan out per-step metrics to the configured sinks."""

    def __init__(
        self,
        run_dir: str | Path,
        sinks: Sequence[str],
        total_steps: int,
        project: str = "sqlagent-rl",
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        wandb_id: str | None = None,
        start_step: int | None = None,
        say: Say = print,
    ) -> None:
        """``start_step``: the step this run continues from (0: a new run). Records of later
        steps in metrics.jsonl and samples.jsonl were made by a process that stopped before
        it saved their checkpoint (killed, its disk full); this run makes them again, so they
        are dropped (``resume_policy.drop_records_after``) and every step stays recorded once.
        None (veRL's workers, which drop them on resume themselves): nothing is dropped here."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.console = "console" in sinks
        self.metrics_path = self.run_dir / "metrics.jsonl"
        if start_step is not None:
            for name in (self.metrics_path.name, SAMPLES):
                drop_records_after(self.run_dir / name, start_step)
        self._jsonl = LineFile(self.metrics_path, RUN_DIR_FULL_HINT)
        self._bar: Any = None  # made at the first train record, after the "before" evaluation
        self._bar_range = (total_steps, start_step or 0)
        self.wandb_run: Any = None
        if "wandb" in sinks:
            self.wandb_run = self._start_wandb(project, run_name, config, wandb_id)

    @property
    def wandb_id(self) -> str | None:
        return getattr(self.wandb_run, "id", None)

    @property
    def wandb_dir(self) -> str | None:
        return getattr(self.wandb_run, "dir", None)

    def _make_bar(self, total: int, start: int) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True, leave=True)

    def _start_wandb(self, project: str, name: str | None, config: Mapping[str, Any] | None, run_id: str | None) -> Any:
        mode = wandb_mode()
        os.environ.setdefault("WANDB_SILENT", "true")  # our own line below says where the run is
        try:
            import wandb

            # A sweep's group and tags arrive as WANDB_RUN_GROUP / WANDB_TAGS (training/runs/sweep.py);
            # passed explicitly, since wandb reads its environment once per process.
            tags = [tag for tag in os.environ.get("WANDB_TAGS", "").split(",") if tag]
            run = wandb.init(
                project=project,
                name=name,
                config=dict(config or {}),
                dir=str(self.run_dir),
                mode=mode,
                id=run_id,
                resume="allow" if run_id else None,
                reinit="finish_previous",
                group=os.environ.get("WANDB_RUN_GROUP") or None,
                tags=tags or None,
            )
        except Exception as err:  # noqa: BLE001 - logging must not stop training; said aloud
            self.say(f"[log] wandb could not start ({type(err).__name__}: {err}); continuing without it")
            return None
        self.say(f"[log] wandb {mode} run {run.id} in {run.dir}")
        return run

    def start_progress(self) -> None:
        """Show the step bar from now on (called after the "before" evaluation)."""
        if self.console and self._bar is None:
            self._bar = self._make_bar(*self._bar_range)

    def log(self, step: int, metrics: Mapping[str, Any], kind: str = "train") -> None:
        """Write one record; train records also advance the bar and print a line."""
        clean = {k: _plain(v) for k, v in metrics.items()}
        record = {"step": step, "kind": kind, "wall_time": time.time(), **clean}
        self._jsonl.append(json.dumps(record, sort_keys=True) + "\n")  # one write: whole or not at all
        if self.wandb_run is not None:
            self.wandb_run.log(
                {f"{kind}/{k}" if kind != "train" else k: v for k, v in clean.items() if isinstance(v, (int, float))},
                step=step,
            )
        if self.console:
            line = f"[{kind} {step}] " + format_metrics({k: v for k, v in clean.items() if k != "inputs"})
            if kind == "train" and self._bar is None:
                self._bar = self._make_bar(*self._bar_range)
            if self._bar is not None and kind == "train":
                self._bar.update(1)
                self._bar.write(line)
            else:
                self.say(line)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def is_accuracy(key: str) -> bool:
    """Keys holding a share in [0, 1] that the console shows as percent (EX and friends)."""
    head = key.split("/", 1)[0]
    return head in ("ex", "ex_official", "rex", "executable", "answered") or key.startswith("qatch")


def format_metrics(metrics: Mapping[str, Any]) -> str:
    """The console summary of a step: the headline numbers, short names, accuracies in %."""

    def show(key: str, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return pct(value) if is_accuracy(key) else f"{value:.3g}"

    parts = []
    for key, short in CONSOLE_KEYS:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
            parts.append(f"{short}={show(key, value)}")
    if not parts:  # evaluation records: print what there is
        parts = [f"{k}={show(k, v)}" for k, v in metrics.items()]
    return " ".join(parts)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


class _Tee:
    """A text stream that writes to the console and to the run log. Progress-bar redraws
    (text before a carriage return) reach only the console; the log gets whole lines."""

    def __init__(self, console: TextIO, log: Callable[[str], None]) -> None:
        import threading

        self.console, self.log, self._line = console, log, ""
        self._lock = threading.Lock()  # Ray's log monitor and tqdm's monitor write from threads

    def write(self, text: str) -> int:
        self.console.write(text)
        with self._lock:
            self._line += text
            if "\n" in self._line:
                *done, self._line = self._line.split("\n")
                self.log("".join(part.rsplit("\r", 1)[-1] + "\n" for part in done))
        return len(text)

    def flush(self) -> None:
        self.console.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the console's
        return getattr(self.console, name)


class ConsoleLog:
    """``with ConsoleLog(run_dir / "run.log", earlier_lines):`` - everything printed to
    stdout / stderr inside (our lines, progress bars' final state, warnings) is also
    appended to the log, after a header and the lines printed before the run directory
    was known. Output of child processes (veRL's Ray workers) goes to their own logs."""

    def __init__(self, path: str | Path, earlier: Sequence[str] = ()) -> None:
        self.path, self.earlier = Path(path), list(earlier)
        self._saved: tuple[TextIO, TextIO] | None = None
        self._file: LineFile | None = None

    def _copy(self, text: str) -> None:
        """Append to run.log; a write that fails (a full disk) ends the copy, said once on the
        console, and the run goes on (its own writes report a full disk where it matters)."""
        if self._file is None:
            return
        try:
            self._file.append(text)
        except OSError as err:
            self._file.close()
            self._file = None
            console = self._saved[1] if self._saved is not None else sys.stderr
            console.write(f"[log] {self.path} is no longer written ({err})\n")

    def __enter__(self) -> ConsoleLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = LineFile(self.path)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._copy(f"==== {stamp} python -m training.run {' '.join(sys.argv[1:])}\n")
        self._copy("".join(line + "\n" for line in self.earlier))
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _Tee(sys.stdout, self._copy)
        sys.stderr = _Tee(sys.stderr, self._copy)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._saved is not None:
            for tee in (sys.stdout, sys.stderr):
                if isinstance(tee, _Tee) and tee._line:
                    tee.write("\n")
            sys.stdout, sys.stderr = self._saved
        if exc_type is not None and not issubclass(exc_type, SystemExit):
            import traceback

            from tools.errors import ToolkitError

            if issubclass(exc_type, ToolkitError):  # the console shows just the message, so does the log
                self._copy(f"error: {exc}\n")
            else:
                self._copy("".join(traceback.format_exception(exc_type, exc, tb)))
        if self._file is not None:
            self._file.close()
            self._file = None
