"""The shared server's token list is parsed strictly and no error carries any part of it."""

from __future__ import annotations

import pytest

from agent.launch.server_auth import TOKENS_ENV, CallerRefused, caller_of, identity_of, scrub, server_tokens

LONG = "0123456789abcdef"


def test_tokens_are_name_token_pairs_and_bad_entries_are_named_without_their_text() -> None:
    assert server_tokens("") == []
    assert server_tokens(f" alice:{LONG}1 , bob:{LONG}2 ,") == [("alice", f"{LONG}1"), ("bob", f"{LONG}2")]
    with pytest.raises(ValueError, match=f"{TOKENS_ENV}: entry 2 is not name:token") as caught:
        server_tokens(f"alice:{LONG},bare-secret-token-value")
    assert "bare-secret" not in str(caught.value)
    with pytest.raises(ValueError, match=r"the token of entry 1 .* is shorter than 16"):
        server_tokens("alice:short")
    with pytest.raises(ValueError, match="entry 2 repeats an earlier entry's name") as caught:
        server_tokens(f"alice:{LONG}1,alice:{LONG}2")
    assert "alice" not in str(caught.value)


def test_a_token_first_entry_is_refused_without_quoting_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"{LONG}-the-secret"
    monkeypatch.setenv(TOKENS_ENV, f"{secret}:alice,bob:{LONG}2")
    with pytest.raises(CallerRefused) as caught:
        caller_of(f"Bearer {LONG}2")
    assert caught.value.status_code == 403 and TOKENS_ENV in caught.value.detail
    assert secret not in caught.value.detail and "alice" not in caught.value.detail
    # any later message that quoted the variable is scrubbed on its way out
    assert scrub(f"bad entry {secret}:alice and {LONG}2") == "bad entry *** and ***"
    assert secret not in CallerRefused(403, f"token {secret}").detail


def test_only_a_bearer_header_with_a_configured_token_names_a_caller() -> None:
    pairs = server_tokens(f"alice:{LONG}1,bob:{LONG}2")
    assert identity_of(f"Bearer {LONG}2", pairs) == "bob"
    assert identity_of(f"bearer  {LONG}1 ", pairs) == "alice"
    for header in (None, "", LONG + "1", f"Basic {LONG}1", "Bearer ", f"Bearer {LONG}", f"Bearer {LONG}1x"):
        assert identity_of(header, pairs) is None, header
