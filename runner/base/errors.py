"""Errors a user can cause. The CLI renders them; nothing else turns them into exit codes."""

from __future__ import annotations

_Str = str | None


class RunnerError(Exception):
    """A problem with the user's input, reported without a traceback (exit code 2)."""

    def __init__(
        self,
        message: str,
        *,
        file: _Str = None,
        field: _Str = None,
        line: int | None = None,
        hint: _Str = None,
    ):
        self.message, self.file, self.field, self.line, self.hint = message, file, field, line, hint
        super().__init__(self.render())

    def render(self, with_hint: bool = True) -> str:
        where = (self.file or "") + (f":{self.line}" if self.line is not None else "")
        head = (f"{where}: " if where else "") + (f"{self.field}: " if self.field else "")
        return head + self.message + (f"\n  hint: {self.hint}" if self.hint and with_hint else "")


class RecipeError(RunnerError):
    """A recipe file that cannot be loaded or validated."""


class DatasetError(RunnerError):
    """A dataset that cannot be read or mapped."""


class TemplateError(RunnerError):
    """A prompt template that is missing, malformed or uses an undefined variable."""
