"""The `taso` command."""

from __future__ import annotations

import click

from taso_py import __version__
from taso_py.cli.common import TasoGroup, setup_logging
from taso_py.cli.compile import compile_command, run_command
from taso_py.cli.convert import convert
from taso_py.cli.generate import generate_rules
from taso_py.cli.info import info
from taso_py.cli.optimize import optimize_command
from taso_py.cli.rules import rules
from taso_py.cli.verify import axioms, verify_rule


@click.group(cls=TasoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="taso")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """taso-py: a verified superoptimizer and compiler for deep-learning graphs."""
    setup_logging(verbose)


main.add_command(info)
main.add_command(convert)
main.add_command(verify_rule)
main.add_command(axioms)
main.add_command(generate_rules)
main.add_command(rules)
main.add_command(optimize_command)
main.add_command(compile_command)
main.add_command(run_command)
