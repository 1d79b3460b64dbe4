"""``taskhub rooms``: an operator keeps a room private, names its members and roles, and
opens it again; the hub's doors follow (docs/operations.md, "Private rooms")."""

from __future__ import annotations

from tests import test_cli
from tests.support.api import ApiClient, assert_problem
from tests.test_cli import assert_clean_failure, cli, in_process_hub, printed_token

# The command line tests' fixtures: a migrated database of each backend.
backend = test_cli.backend
migrated_url = test_cli.migrated_url


async def test_rooms_private_add_remove_and_open(migrated_url: str) -> None:
    alice = printed_token(await cli(migrated_url, "users", "create", "alice"))
    bob = printed_token(await cli(migrated_url, "users", "create", "bob"))

    made = await cli(migrated_url, "rooms", "private", "lab", "--maintainer", "alice")
    assert made.returncode == 0, str(made)
    added = await cli(migrated_url, "rooms", "add", "lab", "--group", "physics", "--role", "viewer")
    assert added.returncode == 0, str(added)
    shown = await cli(migrated_url, "rooms", "show", "lab")
    assert shown.returncode == 0, str(shown)
    lines = shown.stdout.splitlines()
    assert lines[0] == "lab: private"
    assert lines[1].split() == ["KIND", "MEMBER", "ROLE", "ID"]
    assert [line.split()[:3] for line in lines[2:]] == [
        ["user", "alice", "maintainer"],
        ["group", "physics", "viewer"],
    ]

    async with in_process_hub(migrated_url) as http:
        assert (await ApiClient(http, alice).get("/rooms/lab/tasks")).status_code == 200
        assert_problem(await ApiClient(http, bob).get("/rooms/lab/tasks"), 404, "not-found")

    assert (await cli(migrated_url, "rooms", "add", "lab", "--user", "bob")).returncode == 0
    async with in_process_hub(migrated_url) as http:
        room = (await ApiClient(http, bob).get("/rooms/lab")).json()
        assert (room["visibility"], room["role"]) == ("private", "member")

    removed = await cli(migrated_url, "rooms", "remove", "lab", "--user", "bob")
    assert removed.returncode == 0, str(removed)
    assert_clean_failure(await cli(migrated_url, "rooms", "remove", "lab", "--user", "bob"), "bob")
    assert_clean_failure(
        await cli(migrated_url, "rooms", "add", "lab", "--user", "nobody"), "nobody"
    )

    assert (await cli(migrated_url, "rooms", "open", "lab")).returncode == 0
    async with in_process_hub(migrated_url) as http:
        assert (await ApiClient(http, bob).get("/rooms/lab/tasks")).status_code == 200
    members = await cli(migrated_url, "rooms", "members", "lab")
    assert "physics" in members.stdout  # kept for when it is private again
