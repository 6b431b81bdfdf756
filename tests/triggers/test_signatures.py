"""Standard Webhooks signatures: the spec's test vector, rotation, the tolerance's edges, and
hostile headers (every refusal an `Unauthorized`, never another exception)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentos.errors import Unauthorized
from agentos.triggers.signatures import (
    MAX_SIGNATURE_HEADER,
    decode_secret,
    derive_secret,
    encode_secret,
    sign,
    verify,
)

# The Standard Webhooks specification's example (its libraries' tests use the same values).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def headers(signature: str, msg_id: str = SPEC_ID, ts: int | str = SPEC_TS) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}


def refused(
    code: str, secrets: list[bytes], given: dict[str, str], body: bytes = SPEC_BODY, now: float = SPEC_TS
) -> str:
    with pytest.raises(Unauthorized) as caught:
        verify(secrets, given, body, now, 300)
    assert caught.value.code == code
    return caught.value.message


def test_the_spec_vector_signs_and_verifies() -> None:
    secret = decode_secret(SPEC_SECRET)
    assert sign(secret, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    verify([secret], headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TS, 300)
    assert encode_secret(secret) == SPEC_SECRET


def test_a_changed_body_id_or_timestamp_is_refused() -> None:
    secret = decode_secret(SPEC_SECRET)
    refused("invalid_signature", [secret], headers(SPEC_SIGNATURE), b'{"test": 2432232315}')
    refused("invalid_signature", [secret], headers(SPEC_SIGNATURE, msg_id="msg_other"))
    refused("invalid_signature", [secret], headers(SPEC_SIGNATURE, ts=SPEC_TS + 1), now=SPEC_TS + 1)


def test_rotation_any_valid_secret_and_any_entry_matches() -> None:
    old, new = decode_secret(SPEC_SECRET), derive_secret(b"p" * 32, "trg_1", "ab")
    signed_new = sign(new, SPEC_ID, SPEC_TS, SPEC_BODY)
    verify([new, old], headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TS, 300)  # the sender still signs with the old one
    verify([new], headers(f"{SPEC_SIGNATURE} {signed_new}"), SPEC_BODY, SPEC_TS, 300)  # both, space separated
    verify([new], headers(f"v1a,AAAA {signed_new}"), SPEC_BODY, SPEC_TS, 300)  # another version is skipped
    refused("invalid_signature", [new], headers(SPEC_SIGNATURE))  # the old one expired


@pytest.mark.parametrize("offset", [-300, 300, 0])
def test_the_tolerance_edges_are_inside(offset: int) -> None:
    secret = decode_secret(SPEC_SECRET)
    verify([secret], headers(SPEC_SIGNATURE), SPEC_BODY, SPEC_TS + offset, 300)


@pytest.mark.parametrize("offset", [-301, 301, 86400 * 3])
def test_past_the_tolerance_either_way_is_refused(offset: int) -> None:
    # a valid signature, replayed later (or sent with a clock far ahead)
    message = refused(
        "timestamp_out_of_tolerance", [decode_secret(SPEC_SECRET)], headers(SPEC_SIGNATURE), now=SPEC_TS + offset
    )
    assert "300" in message


@pytest.mark.parametrize("ts", ["", "abc", "1614265330.0", " 1614265330", "1_614_265_330", "-1614265330", "١٦"])
def test_a_timestamp_that_is_not_unix_seconds_is_refused(ts: str) -> None:
    given = headers(SPEC_SIGNATURE, ts=ts)
    code = "missing_signature" if not ts else "timestamp_out_of_tolerance"
    refused(code, [decode_secret(SPEC_SECRET)], given)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_refused(missing: str) -> None:
    given = headers(SPEC_SIGNATURE)
    del given[missing]
    refused("missing_signature", [decode_secret(SPEC_SECRET)], given)


@pytest.mark.parametrize(
    "signature",
    ["v1", "v1,", "v1,!!!notbase64", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v2,AAAA", ",,,", "v1,AAA"],
)
def test_malformed_entries_are_refused_and_never_echoed(signature: str) -> None:
    message = refused("invalid_signature", [decode_secret(SPEC_SECRET)], headers(signature))
    assert signature not in message and "test" not in message


def test_a_huge_header_is_refused_unread() -> None:
    huge = (SPEC_SIGNATURE + " ") * (MAX_SIGNATURE_HEADER // len(SPEC_SIGNATURE) + 1)
    refused("invalid_signature", [decode_secret(SPEC_SECRET)], headers(huge))


def test_secrets_are_whsec_base64_of_24_to_64_bytes() -> None:
    assert len(decode_secret(encode_secret(b"x" * 64))) == 64
    assert decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == decode_secret(SPEC_SECRET)  # the prefix is optional
    for bad in ["whsec_" + base64.b64encode(b"x" * 23).decode(), encode_secret(b"x" * 65), "whsec_not base64!"]:
        with pytest.raises(ValueError):
            decode_secret(bad)


def test_derived_secrets_differ_by_pepper_trigger_and_nonce() -> None:
    base = derive_secret(b"pepper", "trg_1", "n1")
    assert len(base) == 32 and base == derive_secret(b"pepper", "trg_1", "n1")
    others = {
        derive_secret(b"pepper2", "trg_1", "n1"),
        derive_secret(b"pepper", "trg_2", "n1"),
        derive_secret(b"pepper", "trg_1", "n2"),
    }
    assert base not in others and len(others) == 3
    # the separators keep (trigger, nonce) pairs apart: "trg_1" + "0n" is not "trg_10" + "n"
    assert derive_secret(b"p", "trg_1", "0n") != derive_secret(b"p", "trg_10", "n")


@settings(max_examples=300, deadline=None)
@given(
    msg_id=st.text(max_size=300),
    ts=st.text(max_size=30),
    signature=st.text(max_size=600),
    body=st.binary(max_size=200),
)
def test_hostile_input_is_only_ever_unauthorized(msg_id: str, ts: str, signature: str, body: bytes) -> None:
    try:
        verify([decode_secret(SPEC_SECRET)], headers(signature, msg_id, ts), body, SPEC_TS, 300)
    except Unauthorized as exc:
        assert exc.code in {"missing_signature", "timestamp_out_of_tolerance", "invalid_signature"}
    else:  # only a real signature passes
        assert signature.count("v1,") >= 1


@settings(max_examples=100, deadline=None)
@given(msg_id=st.text(min_size=1, max_size=100), body=st.binary(max_size=500))
def test_whatever_is_signed_verifies(msg_id: str, body: bytes) -> None:
    secret = derive_secret(b"pepper", "trg_x", "n")
    verify([secret], headers(sign(secret, msg_id, SPEC_TS, body), msg_id), body, SPEC_TS, 300)
