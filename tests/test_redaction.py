"""URL redaction in every message (errors.redact_urls) is linear in the text: a huge name never makes an error
message slow, and it redacts exactly what the plain regular expression would."""

from __future__ import annotations

import random
import re

from dreamshard.cli.app import invoke
from dreamshard.errors import redact_url, redact_urls

#: The reference: every URL (scheme://...) with credentials or a query passed through redact_url.
REFERENCE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def reference(text: str) -> str:
    return REFERENCE.sub(
        lambda m: redact_url(m.group(0)) if ("@" in m.group(0) or "?" in m.group(0)) else m.group(0), text
    )


def test_redaction_matches_the_reference_expression() -> None:
    rng = random.Random(7)
    alphabet = "ab1+.-:/@?=& '\"<>`\n"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 50)))
        if rng.random() < 0.5:
            text += rng.choice(
                [" s3://key:secret@host/b?x=1", " http://h/p", " 9://u:p@h", "x://", "git+ssh://u:p@h/r"]
            )
        assert redact_urls(text) == reference(text), text


def test_a_huge_name_gets_its_one_line_error_with_credentials_redacted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    name = "t" * 300_000
    bad = tmp_path / "inv.yaml"
    bad.write_text(
        f"name: inv\ntables:\n- name: {name}\n  num_embeddings: 10\n  embedding_dim: 3\n  pooling_factor: 1\n"
    )
    code, _, err = invoke(["inventory", "validate", str(bad)])
    assert code == 2 and err.count("\n") == 1
    long = "s3://key:secret@host/" + "a" * 300_000
    assert "secret" not in redact_urls(f"cannot reach {long}") and redact_urls("t" * 300_000) == "t" * 300_000
