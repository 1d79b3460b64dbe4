"""A listing of big tasks is written while its documents are read, against a real server
process: should the database fail on the way, the answer stops short of its end (an
incomplete body, which every HTTP client reports), never a shorter page that looks whole;
and the hub lists the page in full again once the database answers."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

from tests.support.api import ApiClient
from tests.support.big_tasks import points
from tests.support.server import HubServer, provisioned_database
from tests.support.tcp_proxy import TcpProxy

JOB = "room1:modifiers:Blob"
TASKS = 40
POINTS = 36_000  # about 0.9 MB of JSON a payload: 36 MB a page, far past any socket buffer


async def test_a_listing_cut_short_by_the_database_ends_incomplete(tmp_path: Path) -> None:
    with provisioned_database("postgres", tmp_path) as url:
        target = make_url(url)
        with TcpProxy(target.port or 5432) as proxy:
            proxied = target.set(host="127.0.0.1", port=proxy.port)
            server = HubServer(proxied.render_as_string(hide_password=False), log_dir=tmp_path)
            with server:
                async with httpx.AsyncClient(
                    base_url=server.base_url, timeout=60.0, trust_env=False
                ) as http:
                    admin = ApiClient(http, server.admin_token)
                    await admin.register(name="Blob", schema={})
                    for seed in range(TASKS):
                        await admin.submit(JOB, payload=points(POINTS, seed=seed))
                    received, failure = await read_while_the_database_fails(admin, proxy)
                    assert isinstance(failure, httpx.RemoteProtocolError), failure
                    assert 0 < received < TASKS * POINTS * 20

                    proxy.mend()
                    response = await admin.get("/rooms/room1/tasks", params={"limit": 500})
                    assert response.status_code == 200, response.text[:300]
                    assert len(response.json()["items"]) == TASKS


async def read_while_the_database_fails(
    client: ApiClient, proxy: TcpProxy
) -> tuple[int, Exception | None]:
    """Bytes of the room's listing read, the database cut off after the first 100 kB, and
    what reading the rest raised."""
    received = 0
    request = client.http.build_request(
        "GET", "/v1/joblib/rooms/room1/tasks", params={"limit": 500}, headers=client.headers
    )
    response = await client.http.send(request, stream=True)
    try:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        async for chunk in response.aiter_raw():
            if received < 100_000 <= received + len(chunk):
                proxy.cut()
            received += len(chunk)
    except httpx.TransportError as exc:
        return received, exc
    finally:
        await response.aclose()
    return received, None
