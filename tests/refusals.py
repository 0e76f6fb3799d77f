"""One check for bad input: the call raises the expected error, and its message names what was wrong."""

import pytest


def assert_refused(call, error, words):
    """call() raises `error` whose message holds every one of `words`; returns the exception."""
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"
    return info.value
