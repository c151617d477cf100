"""Open a plan store from a URI: a path or file:// URL (local) or s3://bucket/prefix (S3)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

from dreamshard.errors import StoreError, redact_url
from dreamshard.store.base import PlanStore
from dreamshard.store.local import LocalPlanStore
from dreamshard.store.s3 import S3PlanStore

ENDPOINT_ENV_VARS = ("DREAMSHARD_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def s3_endpoint_from_env() -> str | None:
    for var in ENDPOINT_ENV_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return None


def check_endpoint(endpoint: str) -> str:
    """An S3 endpoint URL: http(s)://host[:port][/path], without credentials (user:password@ or a query)."""
    try:
        ep = urlparse(endpoint)
        _ = ep.port  # raises ValueError on a bad port
    except ValueError:
        raise StoreError(f"invalid S3 endpoint URL '{redact_url(endpoint)}'") from None
    if ep.username or ep.password or "@" in ep.netloc or ep.query:
        raise StoreError(
            f"do not put credentials in the S3 endpoint URL ('{redact_url(endpoint)}'); use AWS_* environment "
            f"variables or a profile"
        )
    if ep.scheme not in ("http", "https") or not ep.netloc:
        raise StoreError(f"S3 endpoint must be an http(s) URL, got '{redact_url(endpoint)}'")
    return endpoint


def open_store(uri: str, endpoint_url: str | None = None) -> PlanStore:
    """A LocalPlanStore for a path / file:// URI, an S3PlanStore for s3://bucket/prefix.

    The S3 endpoint comes from `endpoint_url`, else DREAMSHARD_S3_ENDPOINT / AWS_ENDPOINT_URL_S3 /
    AWS_ENDPOINT_URL, else AWS itself. Credentials always come from boto3's chain.
    """
    uri = uri.strip()
    if not uri:
        raise StoreError("empty plan store URI: give a directory or s3://bucket/prefix")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "s3":
        if parsed.username or parsed.password or "@" in parsed.netloc:
            raise StoreError("do not put credentials in the store URI; use AWS_* environment variables or a profile")
        endpoint = endpoint_url or s3_endpoint_from_env()
        if endpoint:
            check_endpoint(endpoint)
        return S3PlanStore(bucket=parsed.netloc, prefix=parsed.path.strip("/"), endpoint_url=endpoint)
    if scheme == "file":
        return LocalPlanStore(unquote(parsed.path))
    if scheme and len(scheme) > 1:  # (one letter would be a Windows drive)
        raise StoreError(f"unsupported plan store URI scheme '{scheme}://': use a directory or s3://bucket/prefix")
    return LocalPlanStore(uri)
