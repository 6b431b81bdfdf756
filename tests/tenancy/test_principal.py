"""The owner rule every route asks of a principal (docs/security.md, "The identity model")."""

from agentos.tenancy.principal import ALL_SCOPES, OPEN_PRINCIPAL, Principal, Via


def user(subject: str, *, tenant_wide: bool = False, resources: frozenset[tuple[str, str]] | None = None) -> Principal:
    return Principal(
        "t1", None, ALL_SCOPES, subject=subject, tenant_wide=tenant_wide, resources=resources, via=Via.USER
    )


def test_a_tenant_key_sees_every_resource_of_its_tenant() -> None:
    key = Principal("t1", "k1", ALL_SCOPES)
    assert key.may_see("session", "s1", None)
    assert key.may_see("session", "s1", "alice")
    assert OPEN_PRINCIPAL.may_see("run", "r1", "bob")


def test_a_user_sees_only_what_it_owns() -> None:
    alice = user("alice")
    assert alice.may_see("session", "s1", "alice")
    assert not alice.may_see("session", "s1", "bob")
    # made by a tenant key: no user owns it, so no user token sees it
    assert not alice.may_see("session", "s1", None)


def test_a_user_with_the_all_scope_sees_the_tenant() -> None:
    assert user("alice", tenant_wide=True).may_see("session", "s1", "bob")


def test_a_browser_token_is_narrowed_to_its_resources_even_for_its_own_user() -> None:
    token = user("alice", resources=frozenset({("session", "s1")}))
    assert token.may_see("session", "s1", "alice")
    assert not token.may_see("session", "s2", "alice")
    assert not token.may_see("run", "s1", "alice")  # the kind is part of the grant
    # narrowing applies to a tenant-wide parent too
    wide = Principal("t1", "k1", ALL_SCOPES, resources=frozenset({("run", "r1")}), via=Via.BROWSER)
    assert wide.may_see("run", "r1", None)
    assert not wide.may_see("run", "r2", None)
