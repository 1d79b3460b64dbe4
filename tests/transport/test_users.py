"""Who the caller is (``GET /users/me``), who submitted a task (``submitted_by``) and who owns
a worker (``owned_by``): together they tell a client which tasks its user may cancel."""

from uuid import UUID

from taskhub.realtime.event_payloads import event_payload
from tests.support.api import JOB, assert_problem


async def test_me_is_the_token_s_user(alice, admin):
    me = await alice.get("/users/me")
    assert me.status_code == 200
    assert me.json() == {"id": me.json()["id"], "name": "alice", "is_superuser": False}
    UUID(me.json()["id"])
    boss = (await admin.get("/users/me")).json()
    assert boss["is_superuser"] is True
    assert boss["id"] != me.json()["id"]


async def test_me_needs_a_token(anonymous):
    assert_problem(await anonymous.get("/users/me"), 401, "unauthorized")


async def test_me_takes_no_other_method(alice):
    assert_problem(await alice.post("/users/me"), 405, "method-not-allowed")


async def test_every_answer_names_the_submitter(alice, bob):
    alice_id = (await alice.get("/users/me")).json()["id"]
    bob_id = (await bob.get("/users/me")).json()["id"]
    job = await alice.register()
    mine = await alice.submit(JOB)
    theirs = await bob.submit(JOB)
    assert (mine["submitted_by"], theirs["submitted_by"]) == (alice_id, bob_id)

    assert (await alice.get(f"/tasks/{theirs['id']}")).json()["submitted_by"] == bob_id
    listed = (await alice.get("/rooms/room1/tasks")).json()["items"]
    assert {t["id"]: t["submitted_by"] for t in listed} == {
        mine["id"]: alice_id,
        theirs["id"]: bob_id,
    }
    claimed = await alice.claim(job["worker_id"])
    assert claimed is not None and claimed["id"] == mine["id"]  # the oldest
    assert claimed["submitted_by"] == alice_id
    running = await alice.transition(claimed["id"], "running")
    assert running.json()["submitted_by"] == alice_id
    cancelled = await bob.transition(theirs["id"], "cancelled")
    assert cancelled.json()["submitted_by"] == bob_id


async def test_the_room_hears_who_submitted(alice, bob, published):
    await alice.register()
    bob_id = (await bob.get("/users/me")).json()["id"]
    task = await bob.submit(JOB)
    await bob.transition(task["id"], "cancelled")
    statuses = [event_payload(e) for e in published if e.name == "task_status_event"]
    assert [(s["status"], s["submitted_by"]) for s in statuses] == [
        ("pending", bob_id),
        ("cancelled", bob_id),
    ]


async def test_worker_listings_name_each_worker_s_owner(alice, bob):
    alice_id = (await alice.get("/users/me")).json()["id"]
    bob_id = (await bob.get("/users/me")).json()["id"]
    alices = (await alice.register())["worker_id"]
    bobs = (await bob.register(name="Other"))["worker_id"]
    for path in ("/workers", "/rooms/room1/workers"):
        items = (await bob.get(path)).json()["items"]
        assert {w["id"]: w["owned_by"] for w in items} == {alices: alice_id, bobs: bob_id}
