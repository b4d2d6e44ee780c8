"""A plain table (headers and text cells) and its Markdown form, shared by the reports and compare."""

from __future__ import annotations

from pydantic import BaseModel


class Table(BaseModel):
    headers: list[str]
    rows: list[list[str]]


def markdown_table(table: Table) -> list[str]:
    """The table as Markdown lines ("None." when it has no rows); pipes in cells become slashes."""
    if not table.rows:
        return ["None."]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |"

    return [line(table.headers), "|" + "---|" * len(table.headers), *[line(row) for row in table.rows]]
