"""`--web-config-file FILE`: TLS, basic auth and response headers for the exporter, in the
Prometheus exporter-toolkit's format (docs/prometheus.md, "TLS and basic auth"). Every key is
checked when zfsobs starts: an unknown one, a key this server cannot honour, or a file that does
not load is one line before anything runs. Relative paths are relative to the file's directory."""
from __future__ import annotations

import base64
import hashlib
import os
import re
import ssl
import stat
import threading
from dataclasses import dataclass, field

import bcrypt
import yaml

from zfsobs.errors import ZfsobsError

MAX_FILE = 1 << 16      # a web config of a few users is a few KiB
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# keys of the format this server does not implement: refused, never silently ignored
UNSUPPORTED = {"cert": "use cert_file", "key": "use key_file", "client_ca": "use client_ca_file",
               "client_allowed_sans": "not implemented", "cipher_suites": "Python's ssl defaults are used",
               "curve_preferences": "Python's ssl defaults are used",
               "prefer_server_cipher_suites": "Python's ssl defaults are used",
               "RequestClientCert": "an asked-for client certificate is always verified here: use "
                                    "VerifyClientCertIfGiven with client_ca_file",
               "RequireAnyClientCert": "an asked-for client certificate is always verified here: use "
                                       "RequireAndVerifyClientCert with client_ca_file"}
TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
HEADERS = {"Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
           "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None, "Strict-Transport-Security": None}
BCRYPT = re.compile(r"\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}")
CACHE = 64              # verified (user, password) pairs kept, so a scrape costs one bcrypt per user


@dataclass
class WebConfig:
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    _ok: set = field(default_factory=set)
    _bcrypt: threading.Lock = field(default_factory=threading.Lock)

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header passes basic_auth_users (always, without users). A
        wrong user costs the same bcrypt as a wrong password; bcrypt runs one at a time, so failed
        logins burn at most one CPU."""
        if not self.users:
            return True
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeError):
            return False
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if not sep or key in self._ok:
            return bool(sep)
        hashed = self.users.get(user)
        with self._bcrypt:
            try:
                ok = bcrypt.checkpw(password.encode(), hashed or next(iter(self.users.values())))
            except ValueError:          # a password past bcrypt's 72 bytes
                ok = False
        if ok and hashed is not None:
            if len(self._ok) >= CACHE:
                self._ok.clear()
            self._ok.add(key)
            return True
        return False


def _fail(path: str, what: str) -> ZfsobsError:
    return ZfsobsError(f"--web-config-file {path}: {what}")


def _read(path: str) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _fail(path, exc.strerror or str(exc)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _fail(path, "not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise _fail(path, f"larger than {MAX_FILE} bytes")
    try:
        doc = yaml.safe_load(data)      # plain data only; 64 KiB nested to the limit: ~1 s
    except (yaml.YAMLError, RecursionError, UnicodeError) as exc:
        raise _fail(path, f"not YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise _fail(path, "want a mapping of tls_server_config, http_server_config, basic_auth_users")
    return doc


def _section(path: str, doc: dict, name: str, known: set) -> dict:
    sec = doc.get(name)
    if sec is None:
        return {}
    if not isinstance(sec, dict):
        raise _fail(path, f"{name}: want a mapping")
    for key in sec:
        if key in UNSUPPORTED:
            raise _fail(path, f"{name}.{key} is not supported by zfsobs ({UNSUPPORTED[key]})")
        if key not in known:
            raise _fail(path, f"{name}: unknown key {key!r}")
        if not isinstance(sec[key], (str, bool)) and key != "headers":
            raise _fail(path, f"{name}.{key}: want a string")
    return sec


def _tls(path: str, sec: dict) -> ssl.SSLContext | None:
    if not sec:
        return None
    here = os.path.dirname(os.path.abspath(path))

    def file(key: str) -> str:
        if not isinstance(sec.get(key), str) or not sec[key]:
            raise _fail(path, f"tls_server_config.{key} is required")
        return os.path.join(here, sec[key])

    auth = sec.get("client_auth_type", "NoClientCert")
    if auth in UNSUPPORTED:
        raise _fail(path, f"client_auth_type {auth} is not supported by zfsobs ({UNSUPPORTED[auth]})")
    if auth not in CLIENT_AUTH:
        raise _fail(path, f"client_auth_type {auth!r}, want one of {', '.join(CLIENT_AUTH)}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for key, attr, default in (("min_version", "minimum_version", "TLS12"), ("max_version", "maximum_version", "TLS13")):
        name = sec.get(key, default)
        if name not in TLS_VERSIONS:
            raise _fail(path, f"tls_server_config.{key}: {name!r}, want one of {', '.join(TLS_VERSIONS)}")
        setattr(ctx, attr, TLS_VERSIONS[name])
    cert, key = file("cert_file"), file("key_file")
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise _fail(path, f"cannot load cert_file/key_file: {getattr(exc, 'strerror', None) or exc}") from None
    if auth != "NoClientCert":
        ca = file("client_ca_file")
        try:
            ctx.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as exc:
            raise _fail(path, f"cannot load client_ca_file: {getattr(exc, 'strerror', None) or exc}") from None
    elif "client_ca_file" in sec:
        raise _fail(path, "client_ca_file needs client_auth_type VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def _headers(path: str, sec: dict) -> dict[str, str]:
    given = sec.get("headers") or {}
    if not isinstance(given, dict):
        raise _fail(path, "http_server_config.headers: want a mapping")
    out = {}
    for name, value in given.items():
        if name not in HEADERS:
            raise _fail(path, f"http_server_config.headers: {name!r}, want one of {', '.join(HEADERS)}")
        if not isinstance(value, str) or not re.fullmatch(r"[\x20-\x7e]*", value):
            raise _fail(path, f"http_server_config.headers.{name}: want printable ASCII text")
        if HEADERS[name] and value and value.lower() not in HEADERS[name]:
            raise _fail(path, f"http_server_config.headers.{name}: {value!r}, want one of {', '.join(HEADERS[name])}")
        if value:
            out[name] = value
    return out


def load(path: str | None) -> WebConfig:
    if not path:
        return WebConfig()
    doc = _read(path)
    for key in doc:
        if key not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise _fail(path, f"unknown key {key!r}" + (" (not supported by zfsobs)" if key == "rate_limit" else ""))
    web = WebConfig(tls=_tls(path, _section(path, doc, "tls_server_config", TLS_KEYS)),
                    headers=_headers(path, _section(path, doc, "http_server_config", {"http2", "headers"})))
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise _fail(path, "basic_auth_users: want a mapping of user: bcrypt hash")
    for user, hashed in users.items():
        if not isinstance(user, str) or ":" in user or not user.isprintable():
            raise _fail(path, f"basic_auth_users: {user!r} is not a user name")
        if not isinstance(hashed, str) or not BCRYPT.fullmatch(hashed):
            raise _fail(path, f"basic_auth_users.{user}: not a bcrypt hash (htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        web.users[user] = hashed.encode()
    return web
