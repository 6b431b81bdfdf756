"""What a `run_command` call is, apart from where it runs: its argv, checked, and its result."""

from __future__ import annotations

from dataclasses import dataclass

from agentos.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_code: int | None  # None when killed at the timeout
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    refused: str = ""  # why the sandbox refused to run it (then nothing ran)

    @classmethod
    def refusal(cls, reason: str) -> CommandResult:
        return cls(None, "", "", False, False, False, refused=reason)

    def to_dict(self) -> dict[str, object]:
        if self.refused:
            return {"error": self.refused}
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "timed_out": self.timed_out,
        }


def check_argv(command: object) -> list[str]:
    """The argv of a `run_command` call.

    Raises:
        InvalidInput: a string (shell command line) or anything but a non-empty list of strings.
    """
    if isinstance(command, str):
        raise InvalidInput('command must be an argv array like ["ls", "-l"], not a string')
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise InvalidInput("command must be a non-empty array of strings")
    if any("\x00" in a for a in command):
        raise InvalidInput("command arguments must not contain NUL bytes")
    return list(command)
