"""Whether a host is this machine: the rule every listener and client applies before it goes without a token."""

from __future__ import annotations

import functools
import ipaddress

__all__ = ["is_loopback"]


@functools.lru_cache(maxsize=256)  # asked on every request and session; parsing the address costs about 5 us
def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, as in a URL) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
