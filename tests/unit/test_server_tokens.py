"""Issue 25 §1: the shared server's token list is parsed strictly and never echoes a secret in its errors."""

from __future__ import annotations

import pytest

from agent.launch.server_auth import TOKENS_ENV, identity_of, server_tokens

LONG = "0123456789abcdef"


def test_tokens_are_name_token_pairs_and_bad_entries_are_named_without_their_text() -> None:
    assert server_tokens("") == []
    assert server_tokens(f" alice:{LONG}1 , bob:{LONG}2 ,") == [("alice", f"{LONG}1"), ("bob", f"{LONG}2")]
    with pytest.raises(ValueError, match=f"{TOKENS_ENV}: entry 2 is not name:token") as caught:
        server_tokens(f"alice:{LONG},bare-secret-token-value")
    assert "bare-secret" not in str(caught.value)
    with pytest.raises(ValueError, match="shorter than 16"):
        server_tokens("alice:short")
    with pytest.raises(ValueError, match="appears twice"):
        server_tokens(f"alice:{LONG}1,alice:{LONG}2")


def test_only_a_bearer_header_with_a_configured_token_names_a_caller() -> None:
    pairs = server_tokens(f"alice:{LONG}1,bob:{LONG}2")
    assert identity_of(f"Bearer {LONG}2", pairs) == "bob"
    assert identity_of(f"bearer  {LONG}1 ", pairs) == "alice"
    for header in (None, "", LONG + "1", f"Basic {LONG}1", "Bearer ", f"Bearer {LONG}", f"Bearer {LONG}1x"):
        assert identity_of(header, pairs) is None, header
