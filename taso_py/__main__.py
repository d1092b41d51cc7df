"""`python -m taso_py` is the `taso` command."""

from taso_py.cli import main

if __name__ == "__main__":  # a spawned worker imports this module again as `__mp_main__`
    main()
