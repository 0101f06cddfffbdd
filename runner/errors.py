"""Errors a user can cause. The CLI renders them; nothing else turns them into exit codes."""

from __future__ import annotations


class RunnerError(Exception):
    """A problem with the user's input, reported without a traceback (exit code 2)."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ):
        self.message = message
        self.file = file
        self.field = field
        self.line = line
        self.hint = hint
        super().__init__(self.render())

    def render(self, with_hint: bool = True) -> str:
        where = self.file or ""
        if self.line is not None:
            where += f":{self.line}"
        head = f"{where}: " if where else ""
        if self.field:
            head += f"{self.field}: "
        text = head + self.message
        if self.hint and with_hint:
            text += f"\n  hint: {self.hint}"
        return text


class RecipeError(RunnerError):
    """A recipe file that cannot be loaded or validated."""


class DatasetError(RunnerError):
    """A dataset that cannot be read or mapped."""


class TemplateError(RunnerError):
    """A prompt template that is missing, malformed or uses an undefined variable."""
