"""Minimal stand-in for plugin.py's VM wiring, so test_vm.py does not depend on plugin.py.

Loaded with ``-p tcpnet_vm_shim -p no:tcpnet``: the real plugin stays out of the way and
this module registers the VM options and runs the session in the VM, as plugin.py does.
"""

import pytest

from pytest_tcpnet import vm


def pytest_addoption(parser):
    vm.add_options(parser.getgroup("tcpnet"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    return vm.maybe_run_in_vm(config)
