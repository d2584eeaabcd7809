"""Who is calling: bearer tokens (JWTs or static API tokens) → a ``Principal`` (tenant, role).

Every ``/api/v1`` request carries ``Authorization: Bearer <token>``. Two kinds of token:

- **JWTs** signed by the deployment's identity provider, verified with PyJWT against the
  configured public keys (``CRONLOG_API_JWT_KEYS_FILE``: one PEM public key, or a JWKS document
  whose ``kid`` picks the key), asymmetric algorithms only (RFC 8725 §2.1: the accepted
  algorithms come from configuration, never from the token). Required claims: ``exp``,
  ``sub``, ``tenant``, ``role``; ``aud`` must be ``CRONLOG_API_JWT_AUDIENCE`` (default
  ``cronlog``) and ``iss`` the configured issuer when one is set.
- **Static API tokens** for local use and automation (``cronlog tokens create``): a random
  ``clt_`` string shown once; the API keeps only its SHA-256 digest (a 256-bit random secret
  needs no slow hash: nothing to brute-force) in ``CRONLOG_API_TOKENS_FILE``, re-read when the
  file changes.

Roles (``Role``): ``viewer`` reads; ``operator`` also operates jobs and runs (trigger, pause,
resume, cancel, retry, backfill, replay dead letters); ``admin`` also changes definitions
(register, update, delete). A principal of tenant ``*`` is the platform's: it sees every
tenant. See docs/tenants.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any

import jwt
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cronlog.errors import CronlogError
from cronlog.tenants import is_tenant_name
from services.api.access.watched import WatchedFile

log = logging.getLogger("cronlog.api.auth")
PLATFORM = "*"
"""The tenant claim of a platform principal: it sees and acts on every tenant."""
TOKEN_PREFIX = "clt_"  # noqa: S105 (a prefix, not a secret)
"""Static API tokens start with this (so a leaked one is recognisable in a secret scan)."""
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA")
"""Accepted JWT signature algorithms: asymmetric only (no ``HS*``, no ``none``)."""


class Role(IntEnum):
    """What a principal may do; each role may do everything of the roles below it."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: object) -> Role:
        """Return the role named ``name`` (``viewer``, ``operator``, ``admin``).

        Raises:
            ValueError: any other value.
        """
        if isinstance(name, str) and name in ("viewer", "operator", "admin"):
            return cls[name.upper()]
        raise ValueError(f"role {_short(name)} is not one of viewer, operator, admin")


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    Attributes:
        subject: who (the JWT's ``sub``, or the static token's name).
        tenant: the tenant it acts for, or ``PLATFORM``.
        role: what it may do.
    """

    subject: str
    tenant: str
    role: Role

    def sees(self, tenant: str) -> bool:
        """Return whether this principal may see resources of ``tenant``."""
        return self.tenant in (PLATFORM, tenant)


class Unauthenticated(CronlogError):
    """The token is missing, malformed, expired, unknown or badly signed (HTTP 401)."""


def _short(value: object) -> str:
    """Return ``repr(value)`` cut to 80 characters: claims are the caller's, echo little."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def digest(token: str) -> str:
    """Return the hex SHA-256 of a static token: what the tokens file keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """Return a fresh static API token: ``clt_`` + 43 URL-safe characters (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _principal(claims: dict[str, Any], subject_key: str) -> Principal:
    tenant, subject = claims.get("tenant"), claims.get(subject_key)
    if not isinstance(tenant, str) or not (tenant == PLATFORM or is_tenant_name(tenant)):
        raise Unauthenticated(f"claim 'tenant' {_short(tenant)} is not a tenant name or '*'")
    try:
        role = Role.parse(claims.get("role"))
    except ValueError as exc:
        raise Unauthenticated(f"claim {exc}") from None
    return Principal(str(subject), tenant, role)


class Authenticator:
    """Turns a bearer token into a ``Principal``; thread-safe.

    Args:
        tokens_file: the static tokens (``{"tokens": [{name, sha256, tenant, role}]}``), or
            None for none; a missing file holds none. Re-read when its mtime or size changes.
        jwt_keys_file: PEM public key or JWKS document, or None: JWTs are then refused.
        audience: the ``aud`` a JWT must carry.
        issuer: the ``iss`` a JWT must carry, or None for any.
    """

    def __init__(
        self,
        tokens_file: Path | None = None,
        jwt_keys_file: Path | None = None,
        audience: str = "cronlog",
        issuer: str | None = None,
    ) -> None:
        self.tokens_file, self.audience, self.issuer = tokens_file, audience, issuer
        self._tokens: WatchedFile[dict[str, Principal]] = WatchedFile(
            tokens_file, load_tokens, {}, "tokens"
        )
        self._keys: jwt.PyJWKSet | None = None
        self._pem: str | None = None
        if jwt_keys_file is not None:
            text = jwt_keys_file.read_text()
            if text.lstrip().startswith("{"):
                self._keys = jwt.PyJWKSet.from_json(text)
            else:
                self._pem = text

    def authenticate(self, token: str) -> Principal:
        """Return the principal of ``token``.

        Raises:
            Unauthenticated: naming what is wrong (never echoing the token).
        """
        if token.startswith(TOKEN_PREFIX):
            found = self._static().get(digest(token))
            if found is None:
                raise Unauthenticated("unknown API token")
            return found
        return self._jwt(token)

    def _static(self) -> dict[str, Principal]:
        return self._tokens.get()

    def _jwt(self, token: str) -> Principal:
        try:
            key: Any = self._pem
            if self._keys is not None:
                kid = jwt.get_unverified_header(token).get("kid")
                key = next(
                    (
                        k
                        for k in self._keys.keys
                        if k.key_id == kid and k.public_key_use in (None, "sig")
                    ),
                    None,
                )
                if key is None:
                    raise Unauthenticated(f"no configured key has kid {_short(kid)}")
            if key is None:
                raise Unauthenticated("not an API token, and no JWT keys are configured")
            claims = jwt.decode(
                token,
                key,
                algorithms=list(JWT_ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "sub", "aud", "tenant", "role"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"bad JWT: {exc}") from None
        return _principal(claims, "sub")


def load_tokens(path: Path) -> dict[str, Principal]:
    """Return the static tokens of ``path`` by digest.

    Raises:
        CronlogError: the file is not the documented JSON shape (naming the entry).
    """
    try:
        entries = json.loads(path.read_text())["tokens"]
        out = {}
        for i, e in enumerate(entries):
            try:
                out[str(e["sha256"])] = _principal(e, "name")
            except (KeyError, Unauthenticated) as exc:
                raise CronlogError(f"{path}: token #{i}: {exc}") from None
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CronlogError(f"{path}: not a tokens file ({exc})") from None


def add_token(path: Path, name: str, tenant: str, role: Role) -> str:
    """Create a static token, append its digest to ``path`` (made 0600), return the token.

    The token itself is stored nowhere: show it to the user once.

    Raises:
        CronlogError: ``path`` already has a token named ``name`` (names identify tokens:
            revoking one is deleting its entry).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = json.loads(path.read_text())["tokens"] if path.exists() else []
    if any(e.get("name") == name for e in entries):
        raise CronlogError(f"{path} already has a token named {name!r}: pick another name")
    token = new_token()
    entries.append(
        {"name": name, "sha256": digest(token), "tenant": tenant, "role": role.name.lower()}
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"tokens": entries}, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return token


_bearer = HTTPBearer(auto_error=False, description="A JWT or a static API token (clt_…)")


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """FastAPI dependency: the caller, or 401 with ``WWW-Authenticate: Bearer``."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    authenticator: Authenticator = request.app.state.authenticator
    try:
        return authenticator.authenticate(credentials.credentials)
    except Unauthenticated as exc:
        raise HTTPException(401, str(exc), {"WWW-Authenticate": "Bearer"}) from None


Caller = Annotated[Principal, Depends(principal)]
"""A route parameter that authenticates the request."""


def require(role: Role) -> Any:
    """Return a dependency refusing (403) a caller below ``role``; it still answers 404 first
    for resources of other tenants (the route looks them up with ``visible_job``)."""

    def check(caller: Caller) -> Principal:
        if caller.role < role:
            raise HTTPException(
                403, f"role {caller.role.name.lower()} may not do this; needs {role.name.lower()}"
            )
        return caller

    return Depends(check)
