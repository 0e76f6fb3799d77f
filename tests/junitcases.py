"""A JUnit file's test cases and their properties: what the tests read of the plugin's JUnit output."""

from xml.etree import ElementTree

__all__ = ["junit_cases"]


def junit_cases(junit):
    """{test name: {property: value}} from a JUnit file."""
    return {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ElementTree.parse(junit).getroot().iter("testcase")
    }
