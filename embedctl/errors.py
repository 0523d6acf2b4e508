"""Errors a user can meet. The CLI prints them without a traceback (set EMBEDCTL_DEBUG=1 for one)."""

from __future__ import annotations


class EmbedctlError(Exception):
    """A problem the user can fix; ``str(err)`` says what and how. Exit code 1 unless set."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  how to fix: {self.hint}"


class ConfigError(EmbedctlError):
    """One or more config problems, all reported at once (exit code 2)."""

    exit_code = 2

    def __init__(self, problems: list[str], *, source: str | None = None):
        self.problems = list(problems)
        self.source = source
        head = f"invalid config{f' ({source})' if source else ''}: {len(self.problems)} problem(s)"
        super().__init__(head + "".join(f"\n  - {p}" for p in self.problems))


class InputError(EmbedctlError):
    """Bad input data: names the file and line (or URL), what was expected and how to fix it."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, hint: str | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        self.path, self.line = path, line
        super().__init__(where + message, hint=hint)


class NotImplementedYet(EmbedctlError):
    """A command or option whose capability has not landed; says so and exits 2."""

    exit_code = 2


def note_partial_output(err: BaseException, folder: object) -> None:
    """Record on ``err`` the folder a stopped command keeps on purpose (a build's ``.NAME.building``, which
    the same command resumes from), so the message of a full disk can name it and its size."""
    try:
        err.partial_output = str(folder)  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__: the generic message stays
        pass
