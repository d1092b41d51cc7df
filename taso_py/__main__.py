"""`python -m taso_py` is the `taso` command."""

from taso_py.cli import main

main()
