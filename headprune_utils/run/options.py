"""Command-line options of the runner's commands that mean what was written: an option that takes one value is an
error when given twice (argparse would take the last one, silently)."""
from __future__ import annotations

import argparse


class Once(argparse.Action):
    """An option that takes one value: given twice (``--profile quick --profile standard``) it is an error naming
    the option and both values, not the last one silently."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in seen:
            parser.error(f"argument {'/'.join(self.option_strings)}: given twice ({seen[self.dest]!r}, then "
                         f"{values!r}); it takes one value: give it once")
        seen[self.dest] = values
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """An argument parser whose :class:`Once` options are checked (and leave nothing behind in the namespace)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.__dict__.pop("_given_once", None)
        return parsed, rest
