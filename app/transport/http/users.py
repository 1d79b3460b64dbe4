"""``/v1/joblib/users/me``: who the caller's token belongs to (Taskhub's addition: the page
shows Cancel only on tasks its viewer may cancel, and who is signed in)."""

from __future__ import annotations

from starlette.responses import Response

from taskhub.transport.http.api import Api, ApiRequest, json_response
from taskhub.transport.http.schemas import UserOut

api = Api()


@api.route("GET", "/users/me", response=UserOut)
async def who_am_i(req: ApiRequest) -> Response:
    """The user the bearer token belongs to."""
    return json_response(UserOut.of(req.principal))
