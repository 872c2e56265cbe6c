"""Comma-separated option parsers shared by the bench commands."""


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def strs(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
