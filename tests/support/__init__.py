"""Shared test helpers (importable as ``tests.support``): real services the tests start themselves."""
