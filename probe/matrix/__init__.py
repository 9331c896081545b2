"""The published matrix: schema, build, render (table / Markdown / JUnit / HTML), merge, diff, gate."""
