async def test_register_submit_claim_complete(alice):
    job = await alice.register()
    task = await alice.submit("room1:modifiers:Rotate")
    claimed = await alice.claim(job["worker_id"])
    assert claimed["id"] == task["id"]
    assert (await alice.transition(task["id"], "running")).status_code == 200
    done = await alice.transition(task["id"], "completed")
    assert done.json()["status"] == "completed"
