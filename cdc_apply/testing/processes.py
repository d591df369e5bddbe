"""The real command line in a process group of its own, killed when the caller says (tests, bench.faults).

``cdc-apply apply`` is a Python driver, Spark's JVM and the JVM's Python workers; a crash test must kill
all of them at once, as a power cut or an OOM killer would, so each run starts a session of its own and
a kill goes to the whole group (``os.killpg``). The next run waits until every process of the group is
gone, so it never meets the old JVM's open files.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# The command line of the cdc_apply this interpreter imports (the virtualenv's console script).
CLI = Path(sys.executable).parent / "cdc-apply"


def session_processes(sid: int) -> dict[int, tuple[str, int]]:
    """``{pid: (command name, parent pid)}`` of every live process of session ``sid``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found[int(entry)] = (stat[stat.index("(") + 1:stat.rindex(")")], int(fields[1]))
    return found


@dataclass
class Finished:
    """How one run of the command line ended."""

    name: str
    returncode: int | None
    seconds: float
    killed: str | None = None            # why it was SIGKILLed (None: it ended by itself)
    killed_after_s: float | None = None
    stdout: str = ""
    stderr: str = ""

    def error_line(self) -> str | None:
        """The line a user sees as the error: ``cdc-apply: error: ...`` or a traceback's last line."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        for line in lines:
            if line.startswith("cdc-apply: error:"):
                return line
        for line in reversed(lines):
            if re.match(r"^[\w.]+(Error|Exception)\b", line):
                return line
        return lines[-1] if lines else None

    def describe(self) -> str:
        how = f"killed after {self.killed_after_s:.1f}s ({self.killed})" if self.killed else f"exit {self.returncode}"
        text = f"{self.name}: {how} in {self.seconds:.1f}s"
        if self.returncode not in (0, None) and not self.killed:
            text += f"\n{self.stderr[-3000:]}"
        return text


class CliProcess:
    """``cdc-apply <args>`` started in a session of its own; its output goes to ``<logdir>/<name>.out|.err``."""

    def __init__(self, name: str, args: list[str], logdir: Path, cwd: Path, env: dict | None = None) -> None:
        self.name = name
        logdir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = logdir / f"{name}.out", logdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([str(CLI), *args], stdout=out, stderr=err, cwd=cwd,
                                         start_new_session=True, env={**os.environ, **(env or {})})
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """``sig`` to the whole process group: the CLI, Spark's JVM and its Python workers."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def before_kill(self) -> None:
        """Called the moment before a kill (a subclass samples memory)."""

    def wait(self, timeout: float = 900, kill_when: Callable[[], str | None] | None = None,
             poll: float = 0.02) -> Finished:
        """Wait for the process; with ``kill_when``, SIGKILL the group as soon as it returns a reason."""
        killed = killed_at = None
        deadline = self.started + timeout
        while self.proc.poll() is None:
            if kill_when is not None:
                reason = kill_when()
                if reason:
                    self.before_kill()
                    self.kill()
                    killed, killed_at = reason, time.monotonic() - self.started
                    break
            if time.monotonic() > deadline:
                self.kill()
                killed, killed_at = f"timeout after {timeout:.0f}s", time.monotonic() - self.started
                break
            time.sleep(poll)
        self.proc.wait()
        self.wait_group_gone()
        return Finished(self.name, self.proc.returncode, time.monotonic() - self.started, killed, killed_at,
                        self.out_path.read_text(errors="replace"), self.err_path.read_text(errors="replace"))

    def wait_group_gone(self, timeout: float = 60) -> None:
        """Processes of the group outlive their parent for a moment (the JVM after a kill): wait, so that
        the next run never meets the old JVM's file handles; a survivor is killed."""
        deadline = time.monotonic() + timeout
        while session_processes(self.proc.pid):
            if time.monotonic() > deadline:
                self.kill()
            time.sleep(0.05)
