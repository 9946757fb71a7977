"""junit.xml for CI systems: one testsuite per mode, one testcase per case."""

from typing import Any
from xml.etree import ElementTree as ET

from ..verdicts.status import NOT_JUDGED
from .schema import interruption

FAILURES = {"fail": "failure", "xpass": "failure", "crashed": "error", "timeout": "error"}
SKIPPED = (*NOT_JUDGED, "xfail")


def render(report: dict[str, Any]) -> str:
    backend = report["backend"]["name"]
    root = ET.Element("testsuites", name=f"torchplug check {backend}")
    suites: dict[str, ET.Element] = {}
    for case in report["cases"]:
        suite = suites.get(case["mode"])
        if suite is None:
            suite = suites[case["mode"]] = ET.SubElement(root, "testsuite", name=f"{backend}.{case['mode']}")
        element = ET.SubElement(suite, "testcase", classname=f"torchplug.check.{backend}.{case['mode']}",
                                name=f"{case['op']}[{case['dtype']}-{case['sample']}]", time=f"{case['time_s']:.4f}")
        status = case["status"]
        if status in FAILURES:
            detail = case["detail"] if status != "xpass" else f"passed, but the manifest expects a failure: " \
                                                              f"{case['manifest_reason']}"
            problem = ET.SubElement(element, FAILURES[status], type=status, message=detail[:500])
            problem.text = f"{detail}\nrepro: {case['repro']}\n\n{case.get('snippet', '')}"
        elif status in SKIPPED:
            ET.SubElement(element, "skipped", message=f"{status}: {case['manifest_reason'] or case['detail']}"[:500])

    def runtime_case(name: str, time_s: float) -> ET.Element:
        if "runtime" not in suites:
            suites["runtime"] = ET.SubElement(root, "testsuite", name=f"{backend}.runtime")
        return ET.SubElement(suites["runtime"], "testcase", classname=f"torchplug.check.{backend}.runtime",
                             name=name, time=f"{time_s:.4f}")

    for check in report["runtime_checks"]:
        element = runtime_case(check["name"], check["time_s"])
        if check["status"] in FAILURES:
            ET.SubElement(element, FAILURES[check["status"]], type=check["status"], message=check["detail"][:500])
        elif check["status"] != "pass":
            ET.SubElement(element, "skipped", message=check["detail"][:500])
    if report.get("interrupted"):  # a CI system must not read the cases that finished as the whole run
        ET.SubElement(runtime_case("run", report["wall_s"]), "error", type="interrupted", message=f"interrupted {interruption(report)}")
    for suite in suites.values():
        children = list(suite)
        suite.set("tests", str(len(children)))
        suite.set("failures", str(sum(1 for c in children if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in children if c.find("error") is not None)))
        suite.set("skipped", str(sum(1 for c in children if c.find("skipped") is not None)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
