"""The field-report base: its vocabulary, the checks every report passes, version ranges, queries."""
