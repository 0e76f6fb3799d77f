"""The promise this example project makes its users: how long an upload may take on a given link."""


def upload_budget_s(nbytes, rate_bps, *, efficiency=0.9):
    """Seconds an upload of `nbytes` may take on a link of `rate_bps`, allowing for TCP/IP overhead."""
    if nbytes < 0 or rate_bps <= 0 or not 0 < efficiency <= 1:
        raise ValueError(f"need nbytes >= 0, rate_bps > 0, 0 < efficiency <= 1; got {nbytes}, {rate_bps}, {efficiency}")
    return nbytes * 8 / (rate_bps * efficiency)
