"""Where a pipeline workspace's `dvc push` sends data and models (`RemoteSpec`): a value the settings, the
workspace and the flows pass around."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict


class RemoteSpec(BaseModel):
    """Where `dvc push` sends data and models: a local directory or s3://bucket/path (+ endpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    endpoint_url: str | None = None

    @property
    def is_s3(self) -> bool:
        return self.url.startswith("s3://")

    def resolved(self, base: Path | None = None) -> RemoteSpec:
        """Local paths made absolute (relative to `base`, default the current directory)."""
        if self.is_s3 or "://" in self.url:
            return self
        p = Path(self.url).expanduser()
        return self.model_copy(update={"url": str(p if p.is_absolute() else ((base or Path.cwd()) / p).resolve())})
