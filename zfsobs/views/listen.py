"""`--listen HOST:PORT`: the exporter's listening socket, bound before anything else starts
(docs/prometheus.md, "Where it listens"). The host is always written out: `:PORT` is refused, so
every address past loopback is one the operator chose; an IPv6 literal goes in brackets."""
from __future__ import annotations

import ipaddress
import re
import socket

from zfsobs.cli_parser import DEFAULT_LISTEN
from zfsobs.errors import ZfsobsError

BACKLOG = 128           # connections the kernel holds before accept(): no fd of ours each
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT or [IPV6]:PORT as (host, port); one line for anything else."""
    m = re.fullmatch(r"\[([^\]]*)\]:([0-9]{1,5})|([^\[\]]*):([0-9]{1,5})", text)
    if not m or not 0 < int(m.group(2) or m.group(4)) < 65536:
        raise ZfsobsError(f"--listen {text}: want HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host, port = (m.group(1), int(m.group(2))) if m.group(2) else (m.group(3), int(m.group(4)))
    if not host:
        raise ZfsobsError(f"--listen {text}: write the address to listen on: 0.0.0.0:{port} (every IPv4 "
                          f"address), [::]:{port} (every address) or 127.0.0.1:{port} (loopback, the default)")
    if m.group(2):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ZfsobsError(f"--listen {text}: [{host}] is not an IPv6 address") from None
    elif ":" in host:
        raise ZfsobsError(f"--listen {text}: an IPv6 address goes in brackets, e.g. [::1]:{port}")
    elif re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ZfsobsError(f"--listen {text}: {host} is not an IPv4 address") from None
    elif not _NAME.fullmatch(host):
        raise ZfsobsError(f"--listen {text}: {host!r} is not an address or a host name")
    return host, port


def bind(text: str) -> socket.socket:
    """The listening socket for --listen TEXT (not inherited by children); a host name binds the
    first address it resolves to. Every failure is one line."""
    host, port = parse_listen(text)
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise ZfsobsError(f"--listen {text}: cannot resolve {host}: {getattr(exc, 'strerror', None) or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ZfsobsError(f"--listen {text}: cannot listen there: {exc.strerror or exc}") from None
    return sock
