"""A caller's W3C tracestate, checked and bounded as the Trace Context spec says: members kept in
order without white space; a malformed one, a key twice or more than 32 members drop it whole;
beyond 512 characters, long members go first, then members from the end."""

from __future__ import annotations

from agentos.telemetry.tracestate import MAX_CHARS, parse_tracestate


def test_a_valid_tracestate_is_kept_in_order_without_white_space() -> None:
    assert parse_tracestate(["rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE"]) == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    assert parse_tracestate(["a=1,,\t", "tenant1@vendor=x y", "b-_*/2=v"]) == "a=1,tenant1@vendor=x y,b-_*/2=v"
    assert parse_tracestate([]) == "" and parse_tracestate([" , "]) == ""


def test_a_malformed_tracestate_is_dropped_whole() -> None:
    bad = [
        "Upper=1",  # keys are lower case
        "a=1,nokey",
        "a=1,a=2",  # a key twice
        "a=x,b=",  # a value is never empty
        "a=x=y",
        "1a=x",  # a simple key starts with a letter
        "a@" + "b" * 15 + "=x",  # a system id is at most 14 characters
        "a=" + "v" * 257,
        "a=caf\u00e9",
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
        "a=" + "v" * 100 + "," * 9000,  # beyond 8192 characters: not parsed
    ]
    for value in bad:
        assert parse_tracestate([value]) == "", value
    assert parse_tracestate(["a=1", "a=2"]) == ""  # across headers too


def test_32_members_are_kept() -> None:
    members = [f"k{i}=v" for i in range(32)]
    assert parse_tracestate([",".join(members)]) == ",".join(members)


def test_beyond_512_characters_long_members_go_first_then_the_last() -> None:
    long = "long=" + "x" * 200  # over 128 characters
    short = [f"k{i:02d}=" + "v" * 40 for i in range(12)]  # 44 characters each, 539 with commas
    kept = parse_tracestate([",".join([short[0], long, *short[1:]])]).split(",")
    assert long not in kept and len(",".join(kept)) <= MAX_CHARS
    assert kept == short[:11]  # the last one went: 11 fit in 512
