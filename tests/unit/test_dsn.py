"""TENANTRY_DATABASE_URL with one host or a cell's several, in both of libpq's spellings
(tenantry.db.dsn): what each names, and the URL every connection then uses."""

from __future__ import annotations

import re

import pytest

from tenantry.db.dsn import Host, MalformedDsn, for_cluster, parse


def test_a_cells_hosts_are_read_in_order_with_their_ports() -> None:
    dsn = parse("postgresql://app:p%40ss@a:5432,b:5433,[::1]/tenantry?sslmode=require")
    assert dsn.hosts == (Host("a", 5432), Host("b", 5433), Host("::1", 5432))
    assert (dsn.user, dsn.password, dsn.database) == ("app", "p@ss", "tenantry")
    assert dsn.where == "Postgres at a:5432, b:5433, [::1]:5432"
    hosts_in_query = parse("postgresql:///tenantry?host=a,b&port=6000,6001")
    assert hosts_in_query.hosts == (Host("a", 6000), Host("b", 6001))


def test_several_hosts_get_the_writable_one_unless_the_operator_chose() -> None:
    url = for_cluster("postgresql://app@a:5432,b:5433/tenantry?sslmode=require")
    assert url == ("postgresql://app@a:5432,b:5433/tenantry?sslmode=require"
                   "&target_session_attrs=read-write")
    chosen = "postgresql://app@a,b/tenantry?target_session_attrs=primary"
    assert for_cluster(chosen) == chosen
    one = "postgresql://app@a:5432/tenantry"
    assert for_cluster(one) == one  # one host: exactly as given
    sockets = parse(for_cluster("postgresql://app@/t?host=/run/a,/run/b"))
    assert [h.name for h in sockets.hosts] == ["/run/a", "/run/b"]
    assert sockets.target_session_attrs == "read-write"


def test_keyword_value_settings_become_a_url() -> None:
    url = for_cluster(r"host=a,b port=5432,5433 dbname=tenantry user=app "
                      r"password='it\'s a secret' sslmode=disable")
    dsn = parse(url)
    assert url.startswith("postgresql://")
    assert dsn.hosts == (Host("a", 5432), Host("b", 5433))
    assert (dsn.user, dsn.password, dsn.database) == ("app", "it's a secret", "tenantry")
    assert dsn.query == {"sslmode": "disable", "target_session_attrs": "read-write"}


@pytest.mark.parametrize(("text", "says"), [
    ("mysql://a/b", "expected a postgresql:// URL"),
    ("postgresql:///x?host=a,b,c&port=1,2", "3 host(s) but 2 ports"),
    ("host=a,b port=1,2,3", "2 host(s) but 3 ports"),
    ("postgresql://a:99999/x", "port 99999 is out of range"),
    ("postgresql://a:http/x", "port 'http' is not a number"),
    ("host=a dbname", "expected keyword=value"),
])
def test_what_cannot_be_read_is_said(text: str, says: str) -> None:
    with pytest.raises(MalformedDsn, match=re.escape(says)):
        parse(text)
