"""The README's quickstart runs as the README says: the one ```python block
under the heading "## Quickstart" is a complete script that
`torchrun --nproc_per_node 2 quickstart.py` runs on CPU in seconds. It must
exit 0 and print what the section says it prints: every line of a ```text
block of the section, and every `X` of a sentence "... prints `X`" (once per
rank when the sentence begins "Each rank prints"). A section that states no
output fails: the quickstart's output must be checkable."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "README.md")
HEADING = "## Quickstart"
TIMEOUT_S = 240  # two ranks importing torch on a loaded 2-CPU machine; the script itself takes seconds


def quickstart_section(readme_path: str, heading: str = HEADING) -> tuple[dict[str, list[str]], str]:
    """The fenced blocks of the section under `heading` (up to the next heading
    of any level, fences respected: a "# comment" inside a block is no
    heading), by language ({"python": [...], "text": [...]}), and its prose."""
    with open(readme_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise AssertionError(f"{readme_path}: no heading {heading!r}") from None
    blocks: dict[str, list[str]] = {}
    prose: list[str] = []
    fence = None  # (language, lines) while inside a block
    for line in lines[start + 1 :]:
        if fence is None:
            if re.match(r"#{1,6} ", line):
                break
            m = re.match(r"```(\w*)\s*$", line)
            if m:
                fence = (m.group(1), [])
            else:
                prose.append(line)
        elif line.strip() == "```":
            blocks.setdefault(fence[0], []).append("\n".join(fence[1]) + "\n")
            fence = None
        else:
            fence[1].append(line)
    assert fence is None, f"{readme_path}: a block under {heading!r} is never closed"
    return blocks, " ".join(prose)


def quickstart_script(readme_path: str, nproc: int = 2, heading: str = HEADING) -> tuple[str, list[tuple[str, int]]]:
    """The section's one python block, and what it must print: (text, at least
    how many times)."""
    blocks, prose = quickstart_section(readme_path, heading)
    python = blocks.get("python", [])
    assert len(python) == 1, f"{readme_path}: {len(python)} python blocks under {heading!r}, the contract is one"
    expected = [(line.strip(), 1) for block in blocks.get("text", []) for line in block.splitlines() if line.strip()]
    for each, text in re.findall(r"(Each rank )?prints `([^`]+)`", prose):
        expected.append((text, nproc if each else 1))
    assert expected, (
        f"{readme_path}: the section under {heading!r} does not say what the quickstart prints "
        '(a ```text block, or a sentence "Each rank prints `...`")'
    )
    return python[0], expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_quickstart(readme_path: str, workdir: str, nproc: int = 2) -> subprocess.CompletedProcess:
    """Writes the quickstart to workdir/quickstart.py and runs it under torchrun."""
    script, _ = quickstart_script(readme_path, nproc)
    path = os.path.join(workdir, "quickstart.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(script)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        path,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=workdir)


def test_readme_quickstart_runs(tmp_path):
    _, expected = quickstart_script(README)
    out = run_quickstart(README, str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    for text, times in expected:
        assert out.stdout.count(text) >= times, (
            f"{text!r} printed {out.stdout.count(text)} times, not {times}:\n{out.stdout}"
        )


SAMPLE = """# A project

## Quickstart

Some words.

```python
# train.py: a comment, not a heading
print("hello")
```

It prints:

```text
hello
```

Each rank prints `hello`; rank 0 prints `done`.

### Next

```python
print("another section")
```

Here nothing prints `elsewhere`.
"""


def test_extraction_follows_the_contract(tmp_path):
    """The section ends at the next heading of any level, headings inside
    blocks do not count, and anything but one python block is refused, as is
    a section that does not say what the script prints."""
    readme = tmp_path / "README.md"
    readme.write_text(SAMPLE)
    assert quickstart_script(str(readme), nproc=3) == (
        '# train.py: a comment, not a heading\nprint("hello")\n',
        [("hello", 1), ("hello", 3), ("done", 1)],
    )
    readme.write_text(SAMPLE.replace("It prints:", "```python\nprint(2)\n```"))
    with pytest.raises(AssertionError, match="2 python blocks under '## Quickstart', the contract is one"):
        quickstart_script(str(readme))
    readme.write_text(SAMPLE.replace("## Quickstart", "## Start"))
    with pytest.raises(AssertionError, match="no heading '## Quickstart'"):
        quickstart_script(str(readme))
    readme.write_text(
        SAMPLE.replace("```text\nhello\n```", "").replace("Each rank prints `hello`; rank 0 prints `done`.", "")
    )
    with pytest.raises(AssertionError, match="does not say what the quickstart prints"):
        quickstart_script(str(readme))
