"""Errors of the object model.

::

    ApiError
    ├── UnknownKind      apiVersion/kind (or a CLI resource name) not in the registry
    └── DecodeError      a document that is not a valid object (names source, index, field, value)
"""

from __future__ import annotations

__all__ = ["ApiError", "DecodeError", "UnknownKind"]


class ApiError(Exception):
    """Base of the object-model errors."""


class UnknownKind(ApiError):  # noqa: N818 - reads as Kubernetes says it
    """A kind that is not registered."""


class DecodeError(ApiError):
    """A document that does not decode into a valid object."""

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        index: int | None = None,
        field: str = "",
        value: str = "",
    ) -> None:
        self.message = message
        self.source = source
        self.index = index
        self.field = field
        self.value = value
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.source:
            where.append(self.source)
        if self.index is not None:
            where.append(f"document {self.index}")
        if self.field:
            where.append(f"field {self.field}")
        text = self.message
        if self.value:
            text = f"{text} (value: {self.value})"
        return ": ".join([*where, text]) if where else text

    def located(self, *, source: str = "", index: int | None = None) -> DecodeError:
        """The same error, with the file and document index it came from."""
        return DecodeError(
            self.message,
            source=source or self.source,
            index=self.index if index is None else index,
            field=self.field,
            value=self.value,
        )
