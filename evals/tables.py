"""A plain table (headers and text cells) and its Markdown form, shared by the reports and compare."""

from __future__ import annotations

from pydantic import BaseModel


class Table(BaseModel):
    headers: list[str]
    rows: list[list[str]]


def num(value: float | None, fmt: str) -> str:
    """A cell for an optional number: "-" when there is none."""
    return "-" if value is None else fmt.format(value)


def times(value: float | None) -> str:
    return num(value, "{:.2f}x")


def percent(value: float | None) -> str:
    return num(value, "{:.0%}")


def markdown_table(table: Table) -> list[str]:
    """The table as Markdown lines ("None." when it has no rows); pipes in cells become slashes."""
    if not table.rows:
        return ["None."]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |"

    return [line(table.headers), "|" + "---|" * len(table.headers), *[line(row) for row in table.rows]]
