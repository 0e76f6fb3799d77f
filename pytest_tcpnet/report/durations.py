"""pytest-split's stored durations (.test_durations: {test id: seconds}) from JUnit XML files a CI already keeps.

pytest-split stores durations itself (`pytest --store-durations`), from one full run on one machine;
a CI that runs its suite as shards, or in several sessions (host, VM), has JUnit files instead. A
test in several files gets its longest time: a shard is balanced for where the test is slowest.
"""

import os
import xml.etree.ElementTree as ET


def durations_from_junit(paths, rootdir="."):
    """{test id: seconds} of every test case in the JUnit files, ids resolved against the test files in rootdir
    (JUnit writes 'tests.test_x' and 'TestClass' as one dotted classname); ValueError names a file it cannot read."""
    durations = {}
    for path in paths:
        try:
            cases = ET.parse(path).iter("testcase")
        except (OSError, ET.ParseError) as exc:
            raise ValueError(f"{path}: not a JUnit XML file ({exc})") from None
        for case in cases:
            nodeid = _nodeid(case.get("classname") or "", case.get("name") or "", rootdir)
            if nodeid is not None:
                durations[nodeid] = max(durations.get(nodeid, 0.0), round(float(case.get("time") or 0), 3))
    return dict(sorted(durations.items()))


def _nodeid(classname, name, rootdir):
    """'tests.test_x.TestY' + 'test_z[a]' -> 'tests/test_x.py::TestY::test_z[a]', if that test file exists."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if os.path.isfile(os.path.join(rootdir, module)):
            return "::".join([module, *parts[cut:], name])
    return None
