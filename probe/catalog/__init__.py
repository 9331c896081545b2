"""Packaged data files, validated at load (pydantic v2), cached per process."""
