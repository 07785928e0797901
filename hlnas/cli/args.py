"""Argument types the ``hlnas`` subcommands share (argparse ``type=`` callables: a bad value is a usage error naming it)."""

from __future__ import annotations

import argparse
import re

__all__ = ["positive_int", "positive_seconds", "fraction", "port", "placement_arg", "space_from_args"]


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be >= 1")
    return n


def positive_seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < s < float("inf"):  # nan and inf too
        raise argparse.ArgumentTypeError(f"{text} must be > 0 seconds")
    return s


def fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{v} is not allowed; give a number from 0 to 1")
    return v


def port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number; allowed: 1-65535") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{n} is not a port number; allowed: 1-65535")
    return n


def space_from_args(args: argparse.Namespace):
    """The space ``--space`` names, with the command's ``--set`` overrides applied."""
    from hlnas.space import load_space

    return load_space(args.space).with_sets(args.set)


def placement_arg(text: str) -> str | list[int]:
    """A strategy name, or comma-separated 0-based attention indices ("5,11,17,23")."""
    if text and (text.lstrip("-")[:1].isdigit() or "," in text):  # "-1": an index, refused by its range
        try:
            return [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad attention indices {text!r}; write e.g. 5,11,17,23") from None
    return text


def accept_negative_index_lists(parser: argparse.ArgumentParser) -> None:
    """Let ``--placement -1,5`` reach its type as a value (then refused by its range in one line): argparse takes a
    token that starts with '-' for a value only if it looks like a negative number, and a comma list of them counts as
    one here."""
    parser._negative_number_matcher = re.compile(r"^-\d+(,\s*-?\d+)*,?$|^-\d*\.\d+$")
