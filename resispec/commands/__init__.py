"""CLI subcommands, one module each (auto-discovered by :mod:`resispec.cli`)."""
