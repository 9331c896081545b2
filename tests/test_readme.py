"""The README's first two commands are the documented set-up; .ci/run must run the second one (the
full suite); the everyday run is `-m "not slow"`."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "README must open with a ```bash block holding the two set-up commands"
    assert text.index("```bash") < 200, "the set-up block must be among the README's first lines"
    cmds = [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    return cmds


def test_readme_opens_with_exactly_two_setup_commands():
    cmds = _setup_commands()
    assert len(cmds) == 2
    assert "probe scan" in cmds[0] and "pip install" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _setup_commands()[1] in ci


EVERYDAY = 'python3 -m pytest -q -m "not slow"'


def test_readme_documents_the_everyday_test_run():
    text = (ROOT / "README.md").read_text()
    assert EVERYDAY in text
    assert EVERYDAY not in (ROOT / ".ci" / "run").read_text()  # CI runs every test, slow ones included
    assert "not slow" not in _setup_commands()[1]


def test_readme_documents_every_verb_and_exit_code():
    from probe.cli.main import VERBS

    text = (ROOT / "README.md").read_text()
    for verb in VERBS:
        assert f"probe {verb}" in text, f"README does not mention `probe {verb}`"
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |", "| 6 |"):
        assert code in text
