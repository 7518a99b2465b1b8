"""How discover and probe run outside commands: a small interface, injected.

Parsing never runs anything; the code that needs command output takes a
`Runner`.  The real one runs the command; tests hand in one that replays
recorded output, so parsers see exactly the text a cluster printed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

try:  # Python 3.8+: typing.Protocol
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore

NOT_FOUND = 127
TIMED_OUT = 124


@dataclass(frozen=True)
class CommandResult:
    argv: tuple
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def not_found(self) -> bool:
        return self.rc == NOT_FOUND

    def why(self) -> str:
        """One line saying how the command failed."""
        from .hints import advice

        cmd = " ".join(self.argv)
        if self.rc == NOT_FOUND:
            line = "%s: command not found" % self.argv[0]
        elif self.rc == TIMED_OUT:
            line = "%s: timed out" % cmd
        else:
            err = (self.stderr or self.stdout).strip().splitlines()
            line = "%s: exit %d%s" % (cmd, self.rc, (": " + err[-1]) if err else "")
        todo = advice(line + "\n" + self.stderr, self.argv[0] if self.argv else "")
        return line + (" -- " + todo if todo else "")


class Runner(Protocol):
    def run(self, argv: Sequence[str], timeout: float = 60.0) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands for real; `env` adds to os.environ (e.g. SLURM_CONF)."""

    def __init__(self, env: Optional[Mapping[str, str]] = None):
        self.env = dict(os.environ)
        if env:
            self.env.update(env)

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> CommandResult:
        argv = tuple(argv)
        import subprocess  # loaded only when a command really runs (gen never does)

        try:
            p = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                env=self.env,
                text=True,
                errors="replace",
            )
        except FileNotFoundError:
            return CommandResult(argv, NOT_FOUND, "", "%s: command not found" % argv[0])
        except PermissionError as exc:
            return CommandResult(argv, 126, "", str(exc))
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout if isinstance(exc.stdout, str) else ""
            return CommandResult(argv, TIMED_OUT, out, "timed out after %gs" % timeout)
        return CommandResult(argv, p.returncode, p.stdout, p.stderr)
