"""Draft/target pair simulators: synthetic families, real n-gram pairs, trees, drift."""

from .families import FAMILIES, PairFamily, get_family, register_family

__all__ = ["FAMILIES", "PairFamily", "get_family", "register_family"]
