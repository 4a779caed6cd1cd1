"""JUnit XML for CI: one test case per scenario searched or per mutant of the gate.

CI systems (GitHub, GitLab, Jenkins) read this format; a finding's invariant and
report path ride along as properties, as the pytest plugin records them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import attrs


@attrs.frozen
class JunitCase:
    """One test case: a failure message (None when it passed), its text, its properties."""

    name: str
    classname: str
    seconds: float
    failure: str | None = None
    details: str = ""
    properties: tuple[tuple[str, str], ...] = ()


def render(suite: str, cases: Sequence[JunitCase]) -> str:
    """The XML document of one test suite.

    >>> print(render("peftlife check", [JunitCase("default", "reference", 1.5)]))
    <?xml version="1.0" encoding="utf-8"?>
    <testsuites><testsuite name="peftlife check" tests="1" failures="0" errors="0" \
skipped="0" time="1.500"><testcase name="default" classname="reference" time="1.500" \
/></testsuite></testsuites>
    """
    total = sum(c.seconds for c in cases)
    failures = sum(c.failure is not None for c in cases)
    root = ET.Element("testsuites")
    element = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{total:.3f}",
    )
    for case in cases:
        item = ET.SubElement(
            element,
            "testcase",
            name=case.name,
            classname=case.classname,
            time=f"{case.seconds:.3f}",
        )
        if case.properties:
            props = ET.SubElement(item, "properties")
            for key, value in case.properties:
                ET.SubElement(props, "property", name=key, value=value)
        if case.failure is not None:
            failure = ET.SubElement(item, "failure", message=case.failure)
            failure.text = case.details
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body


def write(path: Path, suite: str, cases: Sequence[JunitCase]) -> None:
    """Write the suite to ``path``, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(suite, cases) + "\n", "utf-8")
