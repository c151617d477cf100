"""A plan store in an S3 bucket (AWS or any S3-compatible server such as SeaweedFS).

Credentials come only from boto3's default chain (environment, shared config/credentials files,
instance roles); this module never accepts, stores or prints a secret.

`current` is written with a conditional PUT (If-Match on the ETag read, If-None-Match: * when it does
not exist yet), which AWS S3 and SeaweedFS (checked with 4.48) honour: a concurrent writer gets
412 PreconditionFailed and retries on the fresh pointer. Servers that answer 501 NotImplemented to
conditional writes fall back to read-compare-write-reread (best effort; documented in infra/README.md).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dreamshard.errors import StoreError, first_line, redact_url
from dreamshard.store.base import KeyNotFoundError, PlanStore, Version

if TYPE_CHECKING:  # pragma: no cover
    from botocore.exceptions import ClientError

_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
_MISSING_BUCKET_CODES = {"NoSuchBucket"}
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_UNSUPPORTED_CODES = {"NotImplemented", "501"}


class S3PlanStore(PlanStore):
    """Objects live at s3://bucket/prefix/<key>."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        connect_timeout: float = 3.0,
        read_timeout: float = 20.0,
        max_attempts: int = 2,
    ) -> None:
        if not bucket:
            raise StoreError("S3 plan store needs a bucket name (s3://BUCKET/prefix)")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if self.region is None and self.endpoint_url:
            self.region = "us-east-1"  # S3-compatible servers ignore it but signing needs one
        label = redact_url(self.endpoint_url) if self.endpoint_url else None
        where = f" at {label}" if label else ""
        self.location = f"s3://{bucket}/{self.prefix}{where}"
        self._endpoint_label = label or "AWS S3"
        self._conditional_writes = True
        self._client = self._make_client(connect_timeout, read_timeout, max_attempts)

    def _make_client(self, connect_timeout: float, read_timeout: float, max_attempts: int) -> Any:
        import boto3  # optional dependency: boto3
        from botocore.config import Config  # optional dependency: boto3

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        try:
            return boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config
            )
        except Exception as e:  # invalid endpoint URL, broken profile
            raise StoreError(f"cannot configure S3 client for {self._endpoint_label}: {first_line(e)}") from None

    # -- helpers --------------------------------------------------------------------------------------
    def _full(self, key: str) -> str:
        key = key.lstrip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _call(self, op: str, key: str | None, **kwargs: Any) -> Any:
        """Run one client call and turn botocore failures into one-line StoreErrors."""
        from botocore.exceptions import (  # optional dependency: boto3
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        try:
            return getattr(self._client, op)(Bucket=self.bucket, **kwargs)
        except ClientError as e:
            raise self._client_error(e, key) from None
        except (NoCredentialsError, PartialCredentialsError):
            raise StoreError(
                f"no S3 credentials found for endpoint {self._endpoint_label}: set AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY in the environment or configure an AWS profile"
            ) from None
        except (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError):
            raise StoreError(
                f"cannot reach S3 endpoint {self._endpoint_label} (connection refused or timed out); "
                f"start it (infra/start-s3.sh) or set DREAMSHARD_S3_ENDPOINT"
            ) from None
        except BotoCoreError as e:
            raise StoreError(f"S3 request to {self._endpoint_label} failed: {first_line(e)}") from None

    def _client_error(self, e: ClientError, key: str | None) -> StoreError:
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code in _CREDENTIAL_CODES:
            return StoreError(f"S3 rejected the credentials for endpoint {self._endpoint_label} ({code})")
        if code in _MISSING_BUCKET_CODES or (key is None and code in _NOT_FOUND_CODES):
            return StoreError(f"bucket '{self.bucket}' does not exist at endpoint {self._endpoint_label}")
        if code in _NOT_FOUND_CODES:
            return KeyNotFoundError(f"no object '{key}' in {self.location}")
        if code in {"AccessDenied", "403"}:
            return StoreError(
                f"S3 denied access to s3://{self.bucket}/{self.prefix} at {self._endpoint_label} (AccessDenied); "
                f"check the credentials' permissions"
            )
        return _S3ClientError(
            f"S3 {code or status} from {self._endpoint_label} on s3://{self.bucket}/{key or ''}: "
            f"{first_line(err.get('Message', '') or e)}",
            code or status,
        )

    # -- primitives -----------------------------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("put_object", key, Key=self._full(key), Body=data)

    def get_bytes(self, key: str) -> bytes:
        return self.get_versioned_or_raise(key)[0]

    def get_versioned_or_raise(self, key: str) -> tuple[bytes, Version]:
        resp = self._call("get_object", key, Key=self._full(key))
        return resp["Body"].read(), str(resp.get("ETag", ""))

    def get_versioned(self, key: str) -> tuple[bytes, Version] | None:
        try:
            return self.get_versioned_or_raise(key)
        except KeyNotFoundError:
            return None

    def list_keys(self, prefix: str = "") -> list[str]:
        out: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Prefix": self._full(prefix)}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self._call("list_objects_v2", None, **kwargs)
            out.extend(self._rel(o["Key"]) for o in resp.get("Contents", []))
            if not resp.get("IsTruncated"):
                break
            token = resp.get("NextContinuationToken")
        return sorted(out)

    def exists(self, key: str) -> bool:
        try:
            self._call("head_object", key, Key=self._full(key))
        except KeyNotFoundError:
            return False
        return True

    def written_at(self, key: str) -> datetime | None:
        try:
            head = self._call("head_object", key, Key=self._full(key))
        except KeyNotFoundError:
            return None
        when = head.get("LastModified")
        if not isinstance(when, datetime):
            raise StoreError(f"S3 at {self._endpoint_label} gave no LastModified for s3://{self.bucket}/{key}")
        return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)

    def delete(self, key: str) -> None:
        try:
            self._call("delete_object", key, Key=self._full(key))  # S3 answers 204 for an absent key too
        except KeyNotFoundError:
            return

    def put_if(self, key: str, data: bytes, expected: Version | None) -> bool:
        if self._conditional_writes:
            cond = {"IfMatch": expected} if expected is not None else {"IfNoneMatch": "*"}
            try:
                self._call("put_object", key, Key=self._full(key), Body=data, **cond)
                return True
            except _S3ClientError as e:
                if e.code in _PRECONDITION_CODES:
                    return False
                if e.code not in _UNSUPPORTED_CODES:
                    raise
                self._conditional_writes = False  # fall through to the re-read CAS below
            except KeyNotFoundError:
                return False  # If-Match on an object deleted meanwhile
        # Fallback for servers without conditional writes: compare, write, re-read to confirm ours won.
        current = self.get_versioned(key)
        if (current[1] if current else None) != expected:
            return False
        self.put_bytes(key, data)
        after = self.get_versioned(key)
        return after is not None and after[0] == data

    def check(self) -> None:
        """Fail fast (before anything is written) on bad endpoint, credentials or bucket."""
        self._call("list_objects_v2", None, Prefix=self._full(""), MaxKeys=1)


class _S3ClientError(StoreError):
    """An S3 error code we do not map to a friendlier message (keeps the code for callers)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code
