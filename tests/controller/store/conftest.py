"""Store fixtures: ``any_store`` and ``store_opener`` run a test against SQLite and PostgreSQL
(the latter skipped, with the reason, where PostgreSQL or psycopg is not installed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from controller.store import SqliteStore, Store
from tests.controller.store import pg_server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    reason = pg_server.missing()
    if reason is not None:
        pytest.skip(reason)
    with pg_server.server() as conninfo:
        yield conninfo


@pytest.fixture(params=["sqlite", "postgres"])
def store_opener(request, tmp_path) -> Iterator[Callable[[], Store]]:
    """Opens a store on one database, as often as asked (a reopening sees what was saved);
    every store opened is closed at the end."""
    opened: list[Store] = []
    if request.param == "sqlite":
        path = tmp_path / "state.db"

        def open_sqlite() -> Store:
            opened.append(SqliteStore(path))
            return opened[-1]

        yield open_sqlite
    else:
        from controller.store.postgres import PostgresStore

        admin = request.getfixturevalue("postgres_server")
        with pg_server.database(admin) as conninfo:

            def open_postgres() -> Store:
                opened.append(PostgresStore(conninfo))
                return opened[-1]

            yield open_postgres
            for store in opened:
                store.close()
            opened.clear()
    for store in opened:
        store.close()


@pytest.fixture
def any_store(store_opener) -> Store:
    return store_opener()
