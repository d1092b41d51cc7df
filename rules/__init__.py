"""The shipped rule library, as package data (installed as the package taso_py.rules)."""
